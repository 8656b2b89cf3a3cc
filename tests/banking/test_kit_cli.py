"""``scrapeflow bank try`` and ``bank record`` run as a bank author runs them (subprocesses),
against the sandbox's banks."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from scrapeflow.banking.testing import replay
from scrapeflow.sandbox import Sandbox, SandboxAdmin

from .test_bank_cli import BANKS, Cli, add_customer_with_accesses, credentials, truth


@pytest.mark.parametrize("bank", [*BANKS, "neobank"])
def test_try_shows_each_request_then_what_was_read(
    tmp_path: Path, sandbox: Sandbox, bank: str
) -> None:
    cli = Cli(tmp_path, sandbox)
    login = credentials(cli, bank, 4)
    assert not login["otp_required"]
    done = cli(
        "try",
        bank,
        "--login",
        login["username"],
        "--password-stdin",
        stdin=login["password"] + "\n",
    )
    assert done.returncode == 0, done.stderr
    requests = [line for line in done.stderr.splitlines() if " ms " in line]
    assert len(requests) >= 3  # the login, the accounts, their movements
    method, url = requests[0].split()[:2]
    assert method in ("GET", "POST") and url.startswith("http://127.0.0.1:")
    assert " 200 " in requests[0]  # after the redirects, when there were any
    expected = truth(cli, bank, login["username"])
    for account in expected["accounts"]:
        assert account["balance"] in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{bank}: success, {len(expected['accounts'])} accounts, ")
    assert int(summary.split(", ")[-1].split()[0]) > 0  # movements read
    assert login["password"] not in done.stdout + done.stderr
    if bank == "neobank":  # the OAuth redirect chain, then the push polled
        assert " → 302 " in requests[0] and "/auth/approve/status" in done.stderr
    if bank == "formbank":  # its export links carry a token: shown masked
        assert "token=***" in done.stderr and "token=ey" not in done.stderr


def test_record_an_access_by_id_with_the_code_typed_then_replay_it(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """Customer 2's legacy bank login asks for a one-time code: ``--interactive`` reads it from
    the terminal; the recording holds no password, code or login; it replays offline to the
    golden file written beside it."""
    cli = Cli(tmp_path, sandbox)
    creds = add_customer_with_accesses(cli, 2)  # access ids 1, 2, 3 in BANKS' order
    assert creds["legacybank"]["otp_required"]
    har = tmp_path / "rec" / "legacy.har"
    process = subprocess.Popen(
        cli.argv("record", "3", "-o", str(har), "--interactive"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli.env,
    )
    assert process.stdin is not None and process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "asks for a one-time code" in line:
            break
    else:
        pytest.fail("no code asked for:\n" + "".join(seen))

    async def code() -> str:
        async with SandboxAdmin.from_manifest_file(cli.manifest) as admin:
            return await admin.otp("legacybank", creds["legacybank"]["username"])

    typed = asyncio.run(code())
    rest, _ = process.communicate(typed + "\n", timeout=90)
    output = "".join(seen) + rest
    assert process.returncode == 0, output
    assert "recorded" in output and "success" in output
    text = har.read_text()
    for secret in (creds["legacybank"]["password"], creds["legacybank"]["username"], typed):
        assert secret not in text
        assert secret not in output
    golden = har.with_suffix(".json")
    expected = json.loads(golden.read_text())
    assert expected["result"] == "success" and expected["accounts"]
    replayed = asyncio.run(replay(har, golden=golden))
    assert replayed.ok


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("try", "nobank", "--login", "x"), "nobank"),
        (("try", "formbank"), "--login is needed"),
        (("record", "formbank", "--login", "x", "-o", "s.txt"), "a recording is a .har file"),
        (("record", "formbank", "-o", "s.har"), "--login is needed"),
        (("record", "99", "-o", "s.har"), "no access 99"),
        # A place the files cannot go is found before the scrape, not after it.
        (("record", "formbank", "--login", "x", "-o", "TMP/taken.har"), "is a directory"),
        (("record", "formbank", "--login", "x", "-o", "TMP/afile/s.har"), "cannot write in"),
        (
            ("record", "formbank", "--login", "x", "-o", "s.har", "--golden", "TMP/afile/g.json"),
            "cannot write in",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, sandbox: Sandbox, args: tuple[str, ...], says: str
) -> None:
    cli = Cli(tmp_path, sandbox)
    if args[1] == "99":
        add_customer_with_accesses(cli, 1)
    (tmp_path / "taken.har").mkdir()
    (tmp_path / "afile").write_text("a file, not a folder")
    done = cli(*(a.replace("TMP/", f"{tmp_path}/") for a in args), stdin="pw\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.glob("*.har")] == ["taken.har"]


def test_hashed_keys_made_from_a_redacted_description_do_not_refuse_a_recording() -> None:
    """Live, a transfer's description holds the real IBAN; in the recording (and so in the
    replay) its fake: the hashed keys differ, every other field agrees."""
    from datetime import date
    from decimal import Decimal

    from scrapeflow.banking import movement_key
    from scrapeflow.cli._bankkit import comparable

    def golden(description: str, amount: str = "-5.00") -> dict:
        key = movement_key(
            operation_date=date(2026, 3, 1), amount=Decimal(amount), description=description
        )
        other = movement_key(reference="R1")
        moves = [{"key": other, "amount": "1.00"}, {"key": key, "description": description}]
        return {"movements": {"a1": moves}}

    live = golden("TRANSFERENCIA ES00 FAKE")  # as the recording spells the IBAN
    replayed = golden("TRANSFERENCIA ES00 FAKE", amount="-5.01")  # the same text, another key
    assert live != replayed and comparable(live) == comparable(replayed)
    assert comparable(live) != comparable(golden("TRANSFERENCIA ES11 OTHER"))

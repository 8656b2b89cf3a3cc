"""The bank scraper kit (``scrapeflow.banking.testing``): a live session recorded against the
sandbox's banks, replayed offline, compared with golden files; what a recording must not keep."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from schwifty import IBAN

from scrapeflow.banking.testing import (
    OfflineScrape,
    RecordedExchange,
    Recorder,
    Recording,
    Redactor,
    golden_of,
    record,
    replay,
)
from scrapeflow.errors import GoldenMismatch, NotRecorded
from scrapeflow.sandbox import Sandbox, SandboxAdmin

from . import _harness as h

BANKS = ("formbank", "apibank", "legacybank", "neobank")


async def record_customer(
    sandbox: Sandbox, bank: str, n: int, *, recorder: Recorder | None = None
) -> tuple[OfflineScrape, Recording, dict[str, str]]:
    """Record customer ``n`` of ``bank`` (a code fetched from the sandbox when asked); the
    values used: login, password, code."""
    login = await h.credentials(sandbox, bank, n)
    used = {"login": login["username"], "password": login["password"]}

    async def code(_: OfflineScrape) -> str:
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            used["otp"] = await admin.otp(bank, login["username"])
        return used["otp"]

    scrape, recording = await record(
        bank,
        login=login["username"],
        password=login["password"],
        base_url=sandbox.urls[bank],
        otp=code,
        today=await h.sandbox_today(sandbox, bank),
        observers=[recorder] if recorder else [],
    )
    return scrape, recording, used


@pytest.mark.parametrize("bank", BANKS)
async def test_record_then_replay_reads_what_the_live_scrape_read(
    sandbox: Sandbox, tmp_path: Path, bank: str
) -> None:
    live, recording, used = await record_customer(sandbox, bank, 2)
    assert live.ok, live.detail
    truth = await h.truth(sandbox, bank, used["login"])
    assert len(live.accounts) == len(truth["accounts"])
    har = recording.save(tmp_path / f"{bank}.har")

    replayed = await replay(har, golden=tmp_path / f"{bank}.json", update_golden=True)

    assert replayed.ok
    assert golden_of(replayed) == recording.as_recorded(golden_of(live))
    # Every amount, date, key and description as read live (only secrets are spelled anew).
    amounts = [
        (m.key, m.operation_date, m.amount, m.description, m.pending)
        for moves in live.movements.values()
        for m in moves
    ]
    assert amounts == [
        (m.key, m.operation_date, m.amount, m.description, m.pending)
        for moves in replayed.movements.values()
        for m in moves
    ]
    assert sum(map(len, live.movements.values())) > 0
    # The golden file written is the one compared with on the next replay.
    await replay(har, golden=tmp_path / f"{bank}.json")


async def test_a_code_asked_for_is_recorded_and_replayed_in_two_runs(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Legacy bank customer 2 has a one-time code at each login: the recording holds both
    runs (the code asked for, then sent), and replays them."""
    login = await h.credentials(sandbox, "legacybank", 2)
    assert login["otp_required"]
    live, recording, used = await record_customer(sandbox, "legacybank", 2)
    assert live.ok and "otp" in used
    assert recording.meta["otp"] is True
    replayed = await replay(recording.save(tmp_path / "otp.har"))
    assert golden_of(replayed) == recording.as_recorded(golden_of(live))


@pytest.mark.parametrize("bank", BANKS)
async def test_a_recording_keeps_no_password_code_token_cookie_or_iban(
    sandbox: Sandbox, tmp_path: Path, bank: str
) -> None:
    wire = Recorder()  # what crossed the wire, before redaction
    n = 2 if bank == "legacybank" else 3  # legacy 2 is asked for a code
    _, recording, used = await record_customer(sandbox, bank, n, recorder=wire)
    text = recording.save(tmp_path / "s.har").read_text()

    secrets = dict(used)
    for exchange in wire.exchanges:
        for name, value in [*exchange.request_headers, *exchange.response_headers]:
            if name.lower() == "authorization":
                secrets["authorization"] = value.partition(" ")[2]
            if name.lower() in ("cookie", "set-cookie"):
                for cookie in value.split(";")[0].split(";"):
                    cookie_name, _, cookie_value = cookie.strip().partition("=")
                    secrets[f"cookie {cookie_name}"] = cookie_value
            if name.lower() == "location" and "code=" in value:  # an OAuth authorisation code
                secrets["authorisation code"] = dict(parse_qsl(value.partition("?")[2]))["code"]
        for name, value in parse_qsl((exchange.request_body or b"").decode("latin-1")):
            if "clave" in name.lower() and value:  # the password as the page's script encrypts it
                secrets[f"form {name}"] = value
        body = exchange.response_body.decode("latin-1")
        if body.startswith("{") and "access_token" in body:
            secrets["access token"] = json.loads(body)["access_token"]
            secrets["refresh token"] = json.loads(body).get("refresh_token", "")
    truth = await h.truth(sandbox, bank, used["login"])
    for account in truth["accounts"]:
        if account.get("iban"):
            iban = account["iban"]
            secrets[f"iban {iban}"] = iban
            secrets[f"spaced iban {iban}"] = " ".join(iban[i : i + 4] for i in range(0, 24, 4))
            secrets[f"bban {iban}"] = iban[4:]
    assert any(k.startswith("cookie") or k == "authorization" for k in secrets)
    leaked = {name for name, value in secrets.items() if value and value in text}
    assert not leaked
    assert "REDACTED-LOGIN" in text


async def test_a_request_the_recording_lacks_fails_naming_it(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _, recording, _ = await record_customer(sandbox, "apibank", 4)
    har = recording.save(tmp_path / "s.har")
    document = json.loads(har.read_text())
    entries = document["log"]["entries"]
    dropped = next(e for e in entries if "/transactions" in e["request"]["url"])
    entries.remove(dropped)
    har.write_text(json.dumps(document))

    with pytest.raises(NotRecorded) as caught:
        await replay(har)

    message = str(caught.value)
    assert dropped["request"]["url"].split("?")[0] in message
    assert "not in s.har" in message


async def test_what_was_read_differing_from_the_golden_file_names_the_movement(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, recording, _ = await record_customer(sandbox, "formbank", 5)
    har = recording.save(tmp_path / "s.har")
    golden = tmp_path / "s.json"
    await replay(har, golden=golden, update_golden=True)
    expected = json.loads(golden.read_text())
    account, moves = next((ref, moves) for ref, moves in expected["movements"].items() if moves)
    moves[0]["amount"] = "12345.67"
    expected["accounts"][0]["balance"] = "0.01"
    golden.write_text(json.dumps(expected))

    with pytest.raises(GoldenMismatch) as caught:
        await replay(har, golden=golden)

    message = str(caught.value)
    assert f'movements.{account}[{moves[0]["key"]}].amount: expected "12345.67"' in message
    assert 'balance: expected "0.01"' in message
    assert "2 differences" in message

    monkeypatch.setenv("SCRAPEFLOW_UPDATE_GOLDEN", "1")  # what pytest --update-golden sets
    await replay(har, golden=golden)
    monkeypatch.delenv("SCRAPEFLOW_UPDATE_GOLDEN")
    await replay(har, golden=golden)


async def test_a_golden_file_missing_says_how_to_write_it(sandbox: Sandbox, tmp_path: Path) -> None:
    _, recording, _ = await record_customer(sandbox, "apibank", 6)
    with pytest.raises(GoldenMismatch, match="--update-golden"):
        await replay(recording.save(tmp_path / "s.har"), golden=tmp_path / "none.json")


def test_secrets_in_odd_cookies_named_fields_headers_and_fragments_are_taken_out() -> None:
    """What a bank's session may hold besides the usual fields: every value is gone from the
    text, and what is not a secret (a currency code, a description) stays."""
    redactor = Redactor()
    redactor.learn_headers(
        [
            ("Cookie", 'a=first-secret-1; bad"name=second-secret-2; c="third-secret-3"'),
            ("Set-Cookie", "SESSION=fourth-secret-4; Path=/; HttpOnly"),
            ("X-Auth-Token", "fifth-secret-5"),
            ("X-Api-Key", "sixth-secret-6"),
            ("Location", "https://app.example/cb#access_token=seventh-secret-7&state=x"),
        ]
    )
    redactor.learn_pairs(
        [
            ("smsCode", "7788"),
            ("sessionKey", "eighth-secret-8"),
            ("SAMLResponse", "ninth-secret-9"),
            ("jwt", "tenth-secret-10"),
            ("currencyCode", "EUR"),
            ("description", "RECIBO IBERDROLA"),
        ]
    )
    text = (
        "first-secret-1 second-secret-2 third-secret-3 fourth-secret-4 fifth-secret-5 "
        "sixth-secret-6 seventh-secret-7 code: 7788 eighth-secret-8 ninth-secret-9 "
        "tenth-secret-10 EUR RECIBO IBERDROLA"
    )
    redacted = redactor.apply(text)
    assert not re.search(r"secret-\d|7788", redacted), redacted
    assert redacted.endswith("EUR RECIBO IBERDROLA")


def test_a_page_in_an_undeclared_charset_is_redacted_too(tmp_path: Path) -> None:
    """A Windows-1252 page that names no charset is not UTF-8: it was kept whole (base64)."""
    page = "<p>Contraseña: hunter-2024 · IBAN ES9121000418450200051332 · 12€</p>".encode("cp1252")
    exchange = RecordedExchange(
        method="GET",
        url="https://bank.example/perfil",
        request_headers=(),
        request_body=None,
        status=200,
        response_headers=(("Content-Type", "text/html"),),
        response_body=page,
        final_url="https://bank.example/perfil",
    )
    redactor = Redactor(known={"PASSWORD": "hunter-2024"})
    recording = Recording(exchanges=[exchange]).redacted(redactor)
    saved = Recording.load(recording.save(tmp_path / "s.har"))
    body = saved.exchanges[0].response_body.decode("latin-1")
    assert "hunter-2024" not in body and "REDACTED-PASSWORD" in body
    assert "ES9121000418450200051332" not in body and "Contrase" in body


def test_an_iban_is_replaced_however_the_page_writes_it() -> None:
    """Non-breaking spaces, &nbsp;, hyphens, a currency right after it, the Spanish CCC: each
    spelling replaced by the same valid fake, spelled the same way."""
    nbsp = "\u00a0"
    text = (
        f"ES91{nbsp}2100{nbsp}0418{nbsp}4502{nbsp}0005{nbsp}1332 | "
        "ES91&nbsp;2100&nbsp;0418&nbsp;4502&nbsp;0005&nbsp;1332 | "
        "ES91-2100-0418-4502-0005-1332 | ES9121000418450200051332 EUR | "
        "ES9121000418450200051332EUR | 2100 0418 45 0200051332 | 2100-0418-45-0200051332"
    )
    redactor = Redactor()
    redactor.learn_ibans(text)
    redacted = redactor.apply(text)
    assert not re.search(r"2100.?0418|0200051332|4502", redacted), redacted
    fakes = {re.sub(r"[^A-Z0-9]|nbsp", "", part)[:24] for part in redacted.split(" | ")[:5]}
    assert len(fakes) == 1
    [fake] = fakes
    assert IBAN(fake).country_code == "ES"  # valid: a scraper that checks it still accepts it
    assert redacted.split(" | ")[3].endswith(" EUR")

"""Bank refreshes go out through the configured proxies (``SCRAPEFLOW_PROXIES``): the banks
see the proxies' exit IPs, never the machine's own, and no proxy password reaches the output."""

from __future__ import annotations

from pathlib import Path

from scrapeflow.sandbox import Sandbox
from tests._tinyproxy import run_tinyproxy
from tests.banking.test_bank_cli import BANKS, Cli, add_customer_with_accesses


def test_a_refresh_reaches_the_banks_only_through_the_proxies(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    cli = Cli(tmp_path, sandbox)
    add_customer_with_accesses(cli, 1)
    with (
        run_tinyproxy("127.0.0.2", basic_auth=("bob", "hunter2")) as first,
        run_tinyproxy("127.0.0.3", basic_auth=("bob", "hunter2")) as second,
    ):
        proxies = tmp_path / "proxies.txt"
        proxies.write_text(f"{first}\n{second}\n")
        for bank in BANKS:
            sandbox.sites[bank].guard.clients.clear()  # what the banks saw before: not ours
        done = cli("refresh", "cust-1", env={**cli.env, "SCRAPEFLOW_PROXIES": str(proxies)})
    assert done.returncode == 0, done.stdout + done.stderr
    for bank in BANKS:
        seen = set(sandbox.sites[bank].guard.clients)
        assert seen, bank
        assert seen <= {"127.0.0.2", "127.0.0.3"}, (bank, seen)  # never 127.0.0.1 directly
    assert "hunter2" not in done.stdout + done.stderr

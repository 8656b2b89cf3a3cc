"""The whole sandbox: every site on its own port, one clock, the manifest, the CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from scrapeflow.errors import SandboxAdminError
from scrapeflow.sandbox import (
    PlainSite,
    Sandbox,
    SandboxAdmin,
    SandboxConfig,
    serve,
    serve_in_thread,
)


@pytest.mark.parametrize("profile", ["none", "realistic", "hostile"])
async def test_every_profile_serves_every_site(profile: str) -> None:
    config = SandboxConfig(hostility=profile, latency_ms=(0, 0), admin_token="tok")
    async with Sandbox(config) as sandbox, SandboxAdmin.from_sandbox(sandbox) as admin:
        urls = sandbox.urls
        assert set(urls) == {"plain", "feed", "formbank", "apibank", "legacybank", "neobank"}
        assert len({u.rsplit(":", 1)[1] for u in urls.values()}) == 6  # one port per site
        for name in urls:
            if name == "plain":
                continue
            assert await admin.health(name) == name
            switches = await admin.hostility(name)
            if name == "feed":
                assert switches == sandbox.config.feed_hostility()
        manifest = sandbox.manifest()
        assert manifest["sites"] == urls and manifest["hostility"] == profile


async def test_one_clock_moves_every_bank() -> None:
    async with (
        Sandbox(SandboxConfig(latency_ms=(0, 0), admin_token="tok")) as sandbox,
        SandboxAdmin.from_sandbox(sandbox) as admin,
    ):
        login = sandbox.state.world.login("apibank", 42)

        async def movement_count() -> int:
            truth = await admin.truth("apibank", login.username)
            return sum(len(ms) for ms in truth["movements"].values())

        before = await movement_count()
        await admin.advance(timedelta(days=10), site="legacybank")
        assert await movement_count() > before
        with pytest.raises(SandboxAdminError) as refused:
            await admin.advance(timedelta(days=-1), site="feed")
        assert refused.value.status == 400  # the clock only moves forward


def test_sandbox_command_writes_the_manifest_and_stops_on_sigterm(tmp_path: Path) -> None:
    manifest = tmp_path / "sandbox.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapeflow",
            "sandbox",
            "--hostility",
            "hostile",
            "--seed",
            "3",
            "--latency-ms",
            "0-5",
            "--set",
            "captcha_rate=0.5",
            "--manifest",
            str(manifest),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SCRAPEFLOW_SANDBOX_ADMIN_TOKEN": "from-env"},
    )
    try:
        line = proc.stdout.readline()
        printed = json.loads(line)
        deadline = time.monotonic() + 10
        while not manifest.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(manifest.read_text()) == printed
        assert stat.S_IMODE(manifest.stat().st_mode) == 0o600  # it holds the admin token
        assert printed["seed"] == 3 and printed["admin_token"] == "from-env"
        assert printed["switches"]["captcha_rate"] == 0.5
        assert printed["switches"]["ban_mode"] == "empty"
        assert "from-env" not in " ".join(proc.args)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hostility", "evil"], "unknown hostility profile 'evil'"),
        (["--set", "nope=1"], "unknown hostility switch 'nope'"),
        (["--set", "error_rate=2"], "error_rate must be between 0 and 1"),
        (["--latency-ms", "9-1"], "--latency-ms must be 'A-B'"),
    ],
)
def test_bad_sandbox_options_are_one_line_errors(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scrapeflow", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert message in result.stderr


async def test_admin_settings_are_all_or_nothing_and_bad_numbers_are_400() -> None:
    async with (
        Sandbox(SandboxConfig(latency_ms=(0, 0), admin_token="tok")) as sandbox,
        SandboxAdmin.from_sandbox(sandbox) as admin,
    ):
        with pytest.raises(SandboxAdminError) as refused:
            await admin.update_bank_settings("legacybank", maintenance_rate=0.5, layout=3)
        assert refused.value.status == 400 and "layout" in refused.value.detail
        settings = await admin.bank_settings("legacybank")
        assert settings.maintenance_rate == 0.01 and settings.layout == 1  # unchanged
        with pytest.raises(SandboxAdminError) as refused:
            await admin.request(
                "legacybank", "POST", "/__admin/block", json={"ip": "127.0.0.9", "seconds": "soon"}
            )
        assert refused.value.status == 400


async def test_empty_ban_mode_falls_back_to_403_on_banks() -> None:
    config = SandboxConfig(hostility="hostile", latency_ms=(0, 0), admin_token="tok")
    async with (
        Sandbox(config) as sandbox,
        SandboxAdmin.from_sandbox(sandbox) as admin,
        aiohttp.ClientSession() as session,
    ):
        assert (await admin.set_hostility("apibank", ban_mode="empty")).ban_mode == "empty"
        await admin.block("apibank", "127.0.0.1")
        async with session.get(f"{sandbox.urls['apibank']}/api/v2/accounts") as r:
            assert r.status == 403  # a bank cannot fake an empty account list convincingly


def test_customer_count_is_bounded() -> None:
    with pytest.raises(ValueError, match="customers must be between 1 and 999,999"):
        Sandbox(SandboxConfig(customers=1_000_000))


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "192.168.1.10", "example.com"])
async def test_the_library_serves_beyond_loopback_only_when_allowed(host: str) -> None:
    refused = "is not a loopback address"
    with pytest.raises(ValueError, match=refused):
        SandboxConfig(host=host)
    with pytest.raises(ValueError, match=refused):
        async with serve(PlainSite().app(), host=host):
            pass
    with pytest.raises(ValueError, match=refused), serve_in_thread(PlainSite().app, host=host):
        pass
    assert SandboxConfig(host=host, allow_remote=True).host == host  # on purpose: accepted


async def test_any_loopback_address_is_served() -> None:
    config = SandboxConfig(host="127.0.0.2", latency_ms=(0, 0), admin_token="tok")
    async with Sandbox(config) as sandbox, aiohttp.ClientSession() as session:
        assert all(url.startswith("http://127.0.0.2:") for url in sandbox.urls.values())
        async with session.get(f"{sandbox.urls['plain']}/page/1") as r:
            assert r.status == 200


def test_the_sandbox_stops_within_two_seconds_of_sigterm_whatever_its_clients_left() -> None:
    """A client gone with a slow request in flight (a 60 s delay) no longer holds the stop: it
    took the request's whole length (20 s with the realistic profile's slow answers)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapeflow", "sandbox", "--hostility", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        plain = json.loads(proc.stdout.readline())["sites"]["plain"]
        host, port = plain.removeprefix("http://").rsplit(":", 1)
        slow = socket.create_connection((host, int(port)))
        slow.sendall(b"GET /delay/60000 HTTP/1.1\r\nHost: sandbox\r\n\r\n")
        time.sleep(0.5)  # the request is being answered
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.monotonic() - started < 2.0
        slow.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

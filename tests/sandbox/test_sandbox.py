"""The whole sandbox: every site on its own port, one clock, the manifest, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from scrapeflow.sandbox import Sandbox, SandboxConfig


@pytest.mark.parametrize("profile", ["none", "realistic", "hostile"])
async def test_every_profile_serves_every_site(profile: str) -> None:
    config = SandboxConfig(hostility=profile, latency_ms=(0, 0), admin_token="tok")
    async with Sandbox(config) as sandbox, aiohttp.ClientSession() as session:
        urls = sandbox.urls
        assert set(urls) == {"plain", "feed", "formbank", "apibank", "legacybank"}
        assert len({u.rsplit(":", 1)[1] for u in urls.values()}) == 5  # one port per site
        for name, url in urls.items():
            if name == "plain":
                continue
            async with session.get(
                f"{url}/__admin/health", headers={"Authorization": "Bearer tok"}
            ) as r:
                assert (await r.json())["site"] == name
            async with session.get(
                f"{url}/__admin/hostility", headers={"Authorization": "Bearer tok"}
            ) as r:
                switches = await r.json()
            if name == "feed":
                assert switches == sandbox.config.feed_hostility().as_dict()
        manifest = sandbox.manifest()
        assert manifest["sites"] == urls and manifest["hostility"] == profile


async def test_one_clock_moves_every_bank() -> None:
    async with (
        Sandbox(SandboxConfig(latency_ms=(0, 0), admin_token="tok")) as sandbox,
        aiohttp.ClientSession() as session,
    ):
        auth = {"Authorization": "Bearer tok"}
        login = sandbox.state.world.login("apibank", 42)

        async def movement_count() -> int:
            async with session.get(
                f"{sandbox.urls['apibank']}/__admin/truth/{login.username}", headers=auth
            ) as r:
                truth = await r.json()
            return sum(len(ms) for ms in truth["movements"].values())

        before = await movement_count()
        async with session.post(
            f"{sandbox.urls['legacybank']}/__admin/clock", json={"days": 10}, headers=auth
        ) as r:
            assert r.status == 200
        assert await movement_count() > before
        async with session.post(
            f"{sandbox.urls['feed']}/__admin/clock", json={"days": -1}, headers=auth
        ) as r:
            assert r.status == 400  # the clock only moves forward


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
        aiohttp.ClientSession() as session,
    ):
        auth = {"Authorization": "Bearer tok"}
        url = sandbox.urls["legacybank"]
        async with session.post(
            f"{url}/__admin/settings", json={"maintenance_rate": 0.5, "layout": 3}, headers=auth
        ) as r:
            assert r.status == 400
            assert "layout" in (await r.json())["error"]
        async with session.get(f"{url}/__admin/settings", headers=auth) as r:
            settings = await r.json()
        assert settings["maintenance_rate"] == 0.01 and settings["layout"] == 1  # unchanged
        async with session.post(
            f"{url}/__admin/block", json={"ip": "127.0.0.9", "seconds": "soon"}, headers=auth
        ) as r:
            assert r.status == 400


async def test_empty_ban_mode_falls_back_to_403_on_banks() -> None:
    config = SandboxConfig(hostility="hostile", latency_ms=(0, 0), admin_token="tok")
    async with Sandbox(config) as sandbox, aiohttp.ClientSession() as session:
        auth = {"Authorization": "Bearer tok"}
        bank = sandbox.urls["apibank"]
        async with session.post(
            f"{bank}/__admin/hostility", json={"ban_mode": "empty"}, headers=auth
        ):
            pass
        async with session.post(
            f"{bank}/__admin/block", json={"ip": "127.0.0.1"}, headers=auth
        ) as r:
            assert r.status == 200
        async with session.get(f"{bank}/api/v2/accounts") as r:
            assert r.status == 403  # a bank cannot fake an empty account list convincingly


def test_customer_count_is_bounded() -> None:
    with pytest.raises(ValueError, match="customers must be between 1 and 999,999"):
        Sandbox(SandboxConfig(customers=1_000_000))

"""The service inside ``scrapeflow demo``: ``create_app(settings)`` on uvicorn, in a thread of
this process, on loopback.

Its settings are the demo's own: a throw-away SQLite database and vault key in the work
directory (made afresh at each run), the sandbox's banks and clock (through a manifest file,
as ``scrapeflow serve --sandbox`` reads it), one log file per launch in the work directory and
no daily schedule. An admin API key is made for the demo's client once the service listens.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scrapeflow._util.atomic import atomic_write_bytes
from scrapeflow.config import Settings
from scrapeflow.errors import ConfigError
from scrapeflow.sandbox import Sandbox
from scrapeflow.server import tcp_listener

if TYPE_CHECKING:
    import uvicorn

__all__ = ["BANKS", "DemoService", "ServiceThread", "demo_settings", "listen"]

BANKS = ("formbank", "apibank", "legacybank", "neobank")
_DB = "bank.db"
_THROWAWAY = (_DB, f"{_DB}-wal", f"{_DB}-shm", f"{_DB}-journal", "vault.key", "sandbox.json")
_GRACE_SECONDS = 5  # open streams (a dashboard's) at shutdown, before they are cut
_STOP_SECONDS = 30  # then running jobs get the job queue's grace period


@dataclass(frozen=True, slots=True)
class DemoService:
    """The running service: its base URL and an admin key (for the terminal only)."""

    url: str
    admin_key: str


def listen(port: int) -> socket.socket:
    """The service's listening socket on loopback (``port`` 0: a free one), opened before the
    demo starts, so a taken port is refused at once. Raises ConfigError."""
    try:
        return tcp_listener("127.0.0.1", port)
    except OSError as exc:
        raise ConfigError(
            f"--port {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}"
        ) from None


def demo_settings(sandbox: Sandbox, workdir: Path, *, port: int) -> Settings:
    """The service's settings: everything in ``workdir``, nothing from the user's database."""
    from scrapeflow.banking import CredentialVault

    workdir.mkdir(parents=True, exist_ok=True)
    for name in _THROWAWAY:
        (workdir / name).unlink(missing_ok=True)
    key_file = workdir / "vault.key"
    atomic_write_bytes(key_file, CredentialVault.generate_key().encode() + b"\n")
    manifest = workdir / "sandbox.json"  # its clock is the banks' "today"
    atomic_write_bytes(manifest, json.dumps(sandbox.manifest()).encode())
    return Settings(
        db_url=f"sqlite+aiosqlite:///{workdir / _DB}",
        vault_keys=None,  # not the user's key: this database's own
        vault_key_file=key_file,
        sandbox_manifest=manifest,
        sandbox_admin_token=None,
        bank_urls={bank: sandbox.urls[bank] for bank in BANKS},
        log_dir=workdir / "logs",
        jobs_dir=workdir / "jobs",
        jobs_store=None,
        schedule="off",
        api_host="127.0.0.1",
        api_port=port,
    )


class ServiceThread:
    """The service on ``listener``, served from a thread of its own from ``with`` on (it starts
    while the demo does something else), stopped when the block ends: open requests get a few
    seconds, running jobs the job queue's grace period."""

    def __init__(self, sandbox: Sandbox, workdir: Path, listener: socket.socket) -> None:
        self.settings = demo_settings(sandbox, workdir, port=listener.getsockname()[1])
        self._listener = listener
        self._server: uvicorn.Server | None = None
        self._stopping = False
        self._started = threading.Event()
        self._failure: list[BaseException] = []
        self._service: DemoService | None = None
        self._thread = threading.Thread(target=self._run, name="demo-service", daemon=True)

    def __enter__(self) -> ServiceThread:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=_STOP_SECONDS)

    def ready(self) -> DemoService:
        """Wait until the service answers; its URL and the demo's admin key. Raises what
        stopped it from starting."""
        while not self._started.wait(0.02):
            if not self._thread.is_alive():
                break
        if self._failure:
            raise self._failure[0]
        if self._service is None:
            raise ConfigError("the demo's service did not start (see the log above)")
        return self._service

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # told to the main thread by ready()
            self._failure.append(exc)
        finally:
            self._started.set()

    async def _serve(self) -> None:
        import uvicorn

        from scrapeflow.server import create_app
        from scrapeflow.server._connections import uvicorn_config

        config = uvicorn_config(
            create_app(self.settings),
            self.settings,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=_GRACE_SECONDS,
        )
        # Not the main thread: uvicorn leaves the signals alone; __exit__ sets should_exit.
        server = self._server = uvicorn.Server(config)
        server.should_exit = self._stopping
        serving = asyncio.create_task(server.serve(sockets=[self._listener]))
        while not server.started and not serving.done():  # uvicorn has no "started" event
            await asyncio.wait([serving], timeout=0.01)
        if server.started:
            host, port = self._listener.getsockname()[:2]
            key = await _admin_key(self.settings.db_url)
            self._service = DemoService(f"http://{host}:{port}", key)
            self._started.set()
        await serving


async def _admin_key(db_url: str) -> str:
    from scrapeflow.db import create_engine
    from scrapeflow.server import create_key

    engine = create_engine(db_url)
    try:
        token, _ = await create_key(engine, scopes=["admin"], name="scrapeflow demo")
        return token
    finally:
        await engine.dispose()

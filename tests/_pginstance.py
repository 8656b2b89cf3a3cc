"""A throw-away PostgreSQL server of the test's own, for tests that stop and start it.

:class:`PgInstance` runs the machine's installed server binaries (``initdb``, ``pg_ctl`` under
``/usr/lib/postgresql/<version>/bin``, newest first) on a data directory of its own, on a free
port, listening on 127.0.0.1 only, with trust authentication and the fast, unsafe settings a
test can afford (``fsync=off``…). Restarting it disturbs nothing else: the machine's shared
server (``tests/_databases.py``) stays up.

PostgreSQL refuses to run as root: as root the binaries run as the ``postgres`` OS user, and
the data directory is then a private temporary directory that user owns (pytest's ``tmp_path``
is under a root-only directory it could not enter); otherwise it is under ``tmp_path``. Either
way :meth:`PgInstance.close` stops the server and wipes the directory.

Missing binaries: the test is skipped, or fails under ``CI=true`` (:func:`unavailable`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests._servers import unavailable

__all__ = ["PgInstance", "start_pg_instance"]

_BIN_ROOT = Path("/usr/lib/postgresql")
_SERVER_USER = "postgres"
_FAST = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",  # TCP only: no socket file left anywhere
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "logging_collector": "off",
}
_START_BOUND = 60  # seconds pg_ctl may wait for the server to start or stop


def _binaries() -> Path:
    """The bin directory of the newest installed PostgreSQL that has initdb and pg_ctl."""
    found = sorted(
        (p for p in _BIN_ROOT.glob("*/bin") if (p / "initdb").exists() and (p / "pg_ctl").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not found:
        unavailable(f"no PostgreSQL server binaries (initdb, pg_ctl) under {_BIN_ROOT}/*/bin")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PgInstance:
    """A PostgreSQL server on ``127.0.0.1:port``, data in ``directory``; user ``postgres``."""

    bin: Path
    directory: Path
    port: int
    user: str | None  # the OS user the binaries run as (None: this one)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def url(self, database: str = "postgres") -> str:
        """The async (asyncpg) URL of ``database`` on this server."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=_START_BOUND + 30,
            check=False,
            cwd=self.directory,  # the server user may not read the test's working directory
        )
        if done.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise AssertionError(
                f"{args[0]} {args[1]} failed ({done.returncode}): {done.stderr[-2000:]} {tail}"
            )

    def _pg_ctl(self, action: str, *extra: str) -> None:
        self._run("pg_ctl", action, "-D", str(self.data), "-w", "-t", str(_START_BOUND), *extra)

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        self._pg_ctl("start", "-l", str(self.log))

    def stop(self) -> None:
        """Stop the server at once (``-m fast``: clients are disconnected, nothing is lost)."""
        self._pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every client connection is cut."""
        self._pg_ctl("restart", "-m", "fast", "-l", str(self.log))

    def running(self) -> bool:
        status = subprocess.run(
            [str(self.bin / "pg_ctl"), "status", "-D", str(self.data)],
            user=self.user,
            capture_output=True,
            timeout=30,
            check=False,
            cwd=self.directory,
        )
        return status.returncode == 0

    def close(self) -> None:
        """Stop the server (if it runs) and wipe its directory."""
        try:
            if self.data.exists() and self.running():
                self._pg_ctl("stop", "-m", "immediate")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_pg_instance(tmp_path: Path) -> PgInstance:
    """initdb a new cluster and start it on a free port (call :meth:`PgInstance.close`)."""
    binaries = _binaries()
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam(_SERVER_USER)
        except KeyError:
            unavailable(f"running as root, and no {_SERVER_USER!r} OS user to run PostgreSQL as")
        directory = Path(tempfile.mkdtemp(prefix="scrapeflow-pg-"))
        os.chown(directory, owner.pw_uid, owner.pw_gid)
        user: str | None = _SERVER_USER
    else:
        directory = tmp_path / "pg"
        directory.mkdir()
        user = None
    instance = PgInstance(binaries, directory, _free_port(), user)
    try:
        instance._run(
            "initdb",
            "-D",
            str(instance.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
            "--no-instructions",
        )
        settings = {**_FAST, "port": str(instance.port)}
        with (instance.data / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{k} = '{v}'\n" for k, v in settings.items()))
        instance.start()
    except BaseException:
        instance.close()
        raise
    return instance

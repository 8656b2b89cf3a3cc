"""A real HTTP proxy for tests: tinyproxy on loopback, one process per ``run_tinyproxy`` block.

``Bind`` makes tinyproxy open its outgoing connections from a chosen loopback address, so a
site on 127.0.0.1 sees each proxy as a different client (Linux routes all of 127.0.0.0/8 to
the loopback interface)::

    with run_tinyproxy("127.0.0.2", basic_auth=("bob", "hunter2")) as proxy_url:
        ...  # proxy_url == "http://bob:hunter2@127.0.0.1:<port>"; the site sees 127.0.0.2

Install tinyproxy with ``scripts/install-system-deps``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

__all__ = ["free_port", "require_tinyproxy", "run_tinyproxy"]

_LISTEN = "127.0.0.1"
_START_TIMEOUT = 10.0
_SEARCHED = ("/usr/bin/tinyproxy", "/usr/sbin/tinyproxy")


def find_tinyproxy() -> str | None:
    """The tinyproxy binary: on PATH, or where Debian puts it (sbin is not on every PATH)."""
    found = shutil.which("tinyproxy")
    if found:
        return found
    return next((p for p in _SEARCHED if os.access(p, os.X_OK)), None)


def require_tinyproxy() -> str:
    """The tinyproxy binary; if it is missing, skip the test (fail it on CI, where it must be)."""
    binary = find_tinyproxy()
    if binary is None:
        message = "tinyproxy is not installed: run scripts/install-system-deps"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def free_port(host: str = _LISTEN) -> int:
    """A TCP port nothing listens on right now (the OS picks it for a socket bound to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _config(port: int, bind: str, workdir: Path, basic_auth: tuple[str, str] | None) -> str:
    lines = [
        f"Port {port}",
        f"Listen {_LISTEN}",
        f"Bind {bind}",
        "Timeout 30",
        "MaxClients 100",
        "Allow 127.0.0.0/8",
        f'LogFile "{workdir / "tinyproxy.log"}"',
        "LogLevel Info",
        "Syslog Off",
        f'PidFile "{workdir / "tinyproxy.pid"}"',
        'ViaProxyName "tinyproxy"',
    ]
    if basic_auth is not None:
        user, password = basic_auth
        lines.append(f"BasicAuth {user} {password}")
    return "\n".join(lines) + "\n"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((_LISTEN, port), timeout=0.5):
            return True
    except OSError:
        return False


def _log_tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


@contextlib.contextmanager
def run_tinyproxy(
    bind: str = "127.0.0.1",
    *,
    basic_auth: tuple[str, str] | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """Run tinyproxy on 127.0.0.1 (``port``, or a free one), connecting out from ``bind``.

    Yields the proxy URL, with the ``basic_auth`` credentials in it when given. The password
    goes to a config file, never to the command line.
    """
    binary = require_tinyproxy()
    port = free_port() if port is None else port
    with tempfile.TemporaryDirectory(prefix="tinyproxy-") as tmp:
        workdir = Path(tmp)
        config = workdir / "tinyproxy.conf"
        config.write_text(_config(port, bind, workdir, basic_auth))
        config.chmod(0o600)
        log = workdir / "tinyproxy.log"
        process = subprocess.Popen(
            [binary, "-d", "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + _START_TIMEOUT
            while not _accepts(port):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"tinyproxy exited with code {process.returncode} before listening on "
                        f"port {port}; log tail:\n{_log_tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"tinyproxy did not listen on port {port} within {_START_TIMEOUT:g} s; "
                        f"log tail:\n{_log_tail(log)}"
                    )
                time.sleep(0.02)
            credentials = (
                ""
                if basic_auth is None
                else f"{quote(basic_auth[0], safe='')}:{quote(basic_auth[1], safe='')}@"
            )
            yield f"http://{credentials}{_LISTEN}:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

"""What the fetcher's process tests share: running ``scrapeflow fetch`` as a user does, the
processes a run started, a store's lines compared with another's, and a Redis that stalls."""

from __future__ import annotations

import os
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "alive",
    "children",
    "fetch_command",
    "log_lines",
    "run",
    "stalling_redis",
    "store_lines",
    "wait_for",
    "write_list",
]


def write_list(path: Path, lines: list[str]) -> Path:
    path.write_text("# a list\n" + "\n".join(lines) + "\n")
    return path


def fetch_command(listing: Path, store: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "scrapeflow", "fetch", str(listing), "--store", str(store), *args]


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **env},
        timeout=60,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition()`` every 20 ms until it is true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def log_lines(store: Path, program: str = "gofetch") -> int:
    """Lines in the store's fetch logs so far (0 before there is one)."""
    total = 0
    for log in (store / program / "logs").glob("2*"):
        total += log.read_bytes().count(b"\n")
    return total


def store_lines(store: Path, program: str = "gofetch") -> dict[str, list[tuple[str, ...]]]:
    """Every index file and the fetch logs of ``store``, each as its sorted lines with the fields
    that do not depend on when the fetch ran (the store's own path replaced by ``STORE``)."""
    import json

    root = str(store.resolve())
    found: dict[str, list[tuple[str, ...]]] = {}
    for path in sorted((store / program / "index").rglob("*")):
        if path.is_file():
            rows = []
            for line in path.read_text().replace(root, "STORE").splitlines():
                fields = line.split("\t")
                if path.parent.name == "sha384_checksum":  # location, requested, final, parser
                    rows.append((fields[0], fields[1], fields[2], fields[5]))
                else:  # url_sha384's shard file, key first: key, checksum, location, final, parser
                    rows.append((fields[0], fields[2], fields[3], fields[4], fields[5]))
            found[path.relative_to(store).as_posix()] = sorted(rows)
    records = []
    for log in (store / program / "logs").glob("2*"):
        for line in log.read_text().replace(root, "STORE").splitlines():
            r = json.loads(line)
            records.append((r["requested_url"], str(r["status"]), str(r["checksum"])))
    found["logs"] = sorted(records)
    return found


def children(pid: int) -> list[tuple[int, str]]:
    """The processes descended from ``pid`` (workers are forked from a fork server, a child of
    the run), each as (pid, start time) to tell a reused pid."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents.setdefault(int(stat[1]), []).append((int(entry), stat[19]))
    found: list[tuple[int, str]] = []
    below = [pid]
    while below:
        for child in parents.get(below.pop(), []):
            found.append(child)
            below.append(child[0])
    return found


def alive(process: tuple[int, str]) -> bool:
    """Whether the process is still running (a zombie has exited: it only waits to be reaped)."""
    stat = _stat(process[0])
    return stat is not None and stat[19] == process[1] and stat[0] not in ("Z", "X")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat from the state on (the command name may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


class _StallingRedis(socketserver.BaseRequestHandler):
    """Answers every command (PING with PONG) but XADD, which it never answers."""

    def handle(self) -> None:
        reader = self.request.makefile("rb")
        while True:
            command = _read_command(reader)
            if command is None:
                return
            name = command[0].upper() if command else b""
            if name == b"XADD":
                self.server.stalled.set()  # type: ignore[attr-defined]
                while reader.read(1):  # until the client goes away
                    pass
                return
            self.request.sendall(b"+PONG\r\n" if name == b"PING" else b"+OK\r\n")


def _read_command(reader: object) -> list[bytes] | None:
    header = reader.readline()  # type: ignore[attr-defined]
    if not header.startswith(b"*"):
        return None
    parts = []
    for _ in range(int(header[1:])):
        size = int(reader.readline()[1:])  # type: ignore[attr-defined]
        parts.append(reader.read(size + 2)[:-2])  # type: ignore[attr-defined]
    return parts


@contextmanager
def stalling_redis() -> Iterator[tuple[str, threading.Event]]:
    """A Redis on loopback that accepts a connection and PING, then never answers XADD: a
    writer pushing a stored item stops there, after the item's index lines, before its log
    line. Yields its URL and an event set when an XADD arrives."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _StallingRedis)
    server.daemon_threads = True
    server.stalled = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"redis://{host}:{port}/0", server.stalled  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()

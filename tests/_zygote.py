"""The zygote of :mod:`tests._cli`: ``python -m tests._zygote FD MODULE...``.

Imports the modules, then serves requests on the socket ``FD``, one at a time: a JSON request
(arguments, environment, working directory, umask) with the child's stdin, stdout and stderr
as three file descriptors; it forks the child, answers ``{"pid": …}``, waits for it and answers
``{"status": …}`` (its wait status). It ends when the socket closes.

The child becomes the command: its own process group (so a timeout kills what it started
too), its standard streams, directory, environment, umask and ``sys.argv``; then
``scrapeflow.cli.main`` and the interpreter's own way out, as ``python -m scrapeflow`` ends:
``SystemExit`` (or any other exception, printed) leaves this module, and the interpreter waits
for the threads left, runs the exit handlers, flushes and exits with the code.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import socket
import sys
from typing import Any


def _serve(channel: socket.socket) -> dict[str, Any] | None:
    """Serve requests until the socket closes (None), or return a request in the child."""
    while True:
        fds = array.array("i")
        message, ancillary, _, _ = channel.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        if not message:
            return None
        for _level, _kind, data in ancillary:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            channel.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            return dict(request)
        for fd in fds:
            os.close(fd)
        channel.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        channel.sendall(json.dumps({"status": status}).encode() + b"\n")


def _become(request: dict[str, Any]) -> None:
    """In the child: the command's process, up to its end (``SystemExit``)."""
    from scrapeflow.cli._main import main

    os.setpgid(0, 0)
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.argv[0], *request["args"]]
    main(request["args"])  # sys.exit(code): SystemExit, as from `python -m scrapeflow`
    raise SystemExit(0)


if __name__ == "__main__":
    for name in sys.argv[2:]:
        importlib.import_module(name)
    command = _serve(socket.socket(fileno=int(sys.argv[1])))
    if command is not None:
        _become(command)

"""SIGTERM stopping a command the way Ctrl-C does: an exception in the main thread."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "sigterm_interrupts", "terminate"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt``; caught as one.

    A subclass on purpose: CPython remembers a ``KeyboardInterrupt`` that leaves an ``exec`` or
    ``eval`` of a string (annotations read by typing, functions made by dataclasses) and, though
    the program caught it and exited 130, kills its own process with SIGINT at the very end. It
    remembers the exact type only."""


def terminate(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: raise :class:`Terminated`."""
    raise Terminated


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (elsewhere, and
    after the block: as it was)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

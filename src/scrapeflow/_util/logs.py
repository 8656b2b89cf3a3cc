"""Structured logs (structlog) that behave like a library's: quiet until the app configures them.

Library modules log through stdlib ``logging`` loggers named ``scrapeflow.*``, with structlog
building the event dicts; nothing is printed unless the application (or the CLI, through
:func:`configure_logging`) adds a handler. Every event is scrubbed of URL credentials.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from scrapeflow._util.redact import redact, redact_value

__all__ = ["configure_logging", "get_logger"]


def _redact_values(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in event_dict.items():
        event_dict[key] = redact_value(value)
    return event_dict


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    _redact_values,
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structured logger writing to the stdlib logger ``name``."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    return logger


def configure_logging(
    level: str = "WARNING", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Send scrapeflow's logs to ``stream`` (stderr): JSON lines, or pretty on a terminal."""
    stream = sys.stderr if stream is None else stream
    if json is None:
        json = not stream.isatty()
    # A traceback is rendered as text and scrubbed like any value: never the console
    # renderer's default (rich's, which prints each frame's local variables: a password).
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(
            colors=stream.isatty(), exception_formatter=_plain_traceback
        )
    )
    traceback_as_text: list[Any] = [structlog.processors.format_exc_info, _redact_values]
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *(traceback_as_text if json else []),
                renderer,
            ],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                _redact_values,
            ],
        )
    )
    ours = logging.getLogger("scrapeflow")
    for old in list(ours.handlers):
        ours.removeHandler(old)
    ours.addHandler(handler)
    ours.setLevel(level.upper())
    ours.propagate = False
    # Every other library's records (procrastinate, psycopg, asyncio…) in the same format,
    # tracebacks included: not Python's last-resort handler's plain text. Their chatter below
    # INFO stays out even at DEBUG, which is for scrapeflow's own detail.
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
    setattr(handler, _OURS, True)
    root.addHandler(handler)
    root.setLevel(max(logging.getLevelName(level.upper()), logging.INFO))


_OURS = "_scrapeflow_handler"


def _plain_traceback(sio: TextIO, exc_info: Any) -> None:
    """A traceback without local variables, scrubbed of credentials."""
    sio.write("\n" + redact("".join(traceback.format_exception(*exc_info))))

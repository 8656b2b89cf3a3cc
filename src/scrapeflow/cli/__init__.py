"""The ``scrapeflow`` command: one module per command group (``run``, ``fetch``, ``status``,
``sandbox``, ``demo``, ``bank``), shared exit codes and error printing in ``_common``.

Exit codes: 0 everything succeeded; 1 some tasks, URLs or accesses failed (recorded); 2 bad
input or configuration (nothing stored was touched); 3 an unexpected error (what finished is
saved); 130 interrupted (run the same command to resume).
"""

from __future__ import annotations

from scrapeflow.cli._main import app, main

__all__ = ["app", "main"]

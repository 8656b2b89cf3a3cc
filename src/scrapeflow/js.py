"""Run a website's own JavaScript in-process, on an embedded V8 (mini-racer).

Banks encrypt credentials in the browser with their own, often obfuscated, scripts. Rather than
re-implementing them (and breaking when they change), load the bank's script and call it::

    >>> from scrapeflow.js import JsRuntime
    >>> runtime = JsRuntime("function greet(name) { return 'hola ' + name; }")
    >>> runtime.call("greet", "Ana")
    'hola Ana'

A call costs about a millisecond: no Node process, no shell, and no secret on a command line.
A runtime is safe to share between threads (calls are serialised) but not between processes.
"""

from __future__ import annotations

import threading
from typing import Any

from py_mini_racer import MiniRacer

from scrapeflow.errors import JsError

__all__ = ["BROWSER_SHIM", "JsRuntime"]

BROWSER_SHIM = """
var window = this; var self = this; var globalThis = this;
var navigator = {userAgent: 'Mozilla/5.0', language: 'es-ES'};
var document = {getElementById: function () { return {value: ''}; }, cookie: ''};
"""
"""Just enough of a browser for scripts that touch ``window`` or ``document`` on load."""


class JsRuntime:
    """One V8 context with scripts loaded; ``call`` runs a global function of them."""

    def __init__(self, *scripts: str, browser_shim: bool = True) -> None:
        self._lock = threading.Lock()
        self._context = MiniRacer()
        if browser_shim:
            self._eval(BROWSER_SHIM, "the browser shim")
        for n, script in enumerate(scripts, start=1):
            self._eval(script, f"script #{n}")

    def load(self, script: str, *, name: str = "script") -> None:
        """Evaluate another script in this context."""
        self._eval(script, name)

    def call(self, function: str, *args: Any) -> Any:
        """Call the global ``function`` with JSON-serialisable ``args``; its JSON-able result.

        Errors name the function and the JavaScript exception, never the arguments (they may be
        passwords).
        """
        with self._lock:
            try:
                return self._context.call(function, *args)
            except Exception as exc:
                raise JsError(f"JavaScript {function}() failed: {_first_line(exc)}") from None

    def _eval(self, script: str, name: str) -> None:
        with self._lock:
            try:
                self._context.eval(script)
            except Exception as exc:
                raise JsError(f"JavaScript {name} did not load: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""Run a website's own JavaScript in-process, on an embedded V8 (mini-racer).

Banks encrypt credentials in the browser with their own, often obfuscated, scripts. Rather than
re-implementing them (and breaking when they change), load the bank's script and call it::

    >>> from scrapeflow.js import JsRuntime
    >>> runtime = JsRuntime("function greet(name) { return 'hola ' + name; }")
    >>> runtime.call("greet", "Ana")
    'hola Ana'

A call costs about a millisecond: no Node process, no shell, and no secret on a command line.
A runtime is safe to share between threads (calls are serialised) but not between processes.

Making one costs more than a hundred calls (a V8 context, its threads, the scripts compiled:
about 5 ms of CPU), so :func:`shared_runtime` keeps one per script on each event loop for
callers that each load the same script (every login of a bank's scrapers).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import weakref
from collections import OrderedDict
from typing import Any

from py_mini_racer import MiniRacer

from scrapeflow.errors import JsError

__all__ = ["BROWSER_SHIM", "JsRuntime", "shared_runtime"]

_SHARED_PER_LOOP = 8
"""Scripts kept compiled per event loop: a bank that varies its script per page (a nonce in
it) must not grow the cache without end."""

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


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OrderedDict[bytes, JsRuntime]] = (
    weakref.WeakKeyDictionary()
)


def shared_runtime(*scripts: str, browser_shim: bool = True) -> JsRuntime:
    """A runtime with ``scripts`` loaded, shared by every caller on the running event loop.

    One V8 context per event loop (a mini-racer context belongs to the loop it was made on),
    kept while the loop lives, for the last few distinct scripts. Callers share the scripts'
    global state, so share only scripts called as functions of their arguments (a bank's
    password encryption), never one that keeps a secret in a global between calls.

    >>> runtime = shared_runtime("function add(a, b) { return a + b; }")  # doctest: +SKIP
    """
    loop = asyncio.get_running_loop()
    digest = hashlib.sha256(repr((browser_shim, scripts)).encode()).digest()
    kept = _shared.get(loop)
    if kept is None:
        kept = _shared[loop] = OrderedDict()
    runtime = kept.get(digest)
    if runtime is not None:
        kept.move_to_end(digest)
        return runtime
    runtime = kept[digest] = JsRuntime(*scripts, browser_shim=browser_shim)
    if len(kept) > _SHARED_PER_LOOP:
        kept.popitem(last=False)
    return runtime


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

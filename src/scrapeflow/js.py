"""Run a website's own JavaScript in-process, on an embedded V8 (mini-racer).

Banks encrypt credentials in the browser with their own, often obfuscated, scripts. Rather than
re-implementing them (and breaking when they change), load the bank's script and call it::

    >>> from scrapeflow.js import JsRuntime
    >>> runtime = JsRuntime("function greet(name) { return 'hola ' + name; }")
    >>> runtime.call("greet", "Ana")
    'hola Ana'
    >>> runtime.eval("greet('Eva').toUpperCase()")
    'HOLA EVA'

A call costs about a millisecond: no Node process, no shell, and no secret on a command line.
A runtime is safe to share between threads (calls are serialised) but not between processes.

Making one costs more than a hundred calls (a V8 context, its threads, the scripts compiled:
about 5 ms of CPU), so :func:`shared_runtime` keeps one per script on each event loop for
callers that each load the same script (every login of a bank's scrapers).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
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
    """One V8 context with scripts loaded; ``call`` runs a global function of them, ``eval``
    an expression.

    Errors name the script and the line where JavaScript failed (``login.js:12: TypeError:
    …``): each script is loaded under its name (``names``, or ``script-1.js``, ``script-2.js``…
    in the order given; :meth:`load` takes one), never with the values it was called with.
    """

    def __init__(self, *scripts: str, browser_shim: bool = True, names: Sequence[str] = ()) -> None:
        self._lock = threading.Lock()
        self._context = MiniRacer()
        if browser_shim:
            self._eval(BROWSER_SHIM, "browser-shim.js")
        for n, script in enumerate(scripts, start=1):
            self._eval(script, names[n - 1] if n <= len(names) else f"script-{n}.js")

    def load(self, script: str, *, name: str = "script.js") -> None:
        """Evaluate another script in this context, under ``name`` (in its errors)."""
        self._eval(script, name)

    def eval(self, expression: str) -> Any:
        """The value of ``expression`` (or of a snippet's last statement), evaluated in this
        context's global scope, as plain Python (through JSON: objects are dicts, arrays
        lists; ``undefined`` and functions None). Errors read ``expression:LINE: …``.

        >>> JsRuntime("var rates = {eur: 1};").eval("Object.keys(rates)")
        ['eur']
        """
        code = f"JSON.stringify((0, eval)({json.dumps(_named(expression, 'expression'))}))"
        with self._lock:
            try:
                result = self._context.eval(code)
            except Exception as exc:
                raise JsError(f"JavaScript expression failed: {_first_line(exc)}") from None
        return json.loads(result) if isinstance(result, str) else None

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
                self._context.eval(_named(script, name))
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


def _named(script: str, name: str) -> str:
    """``script`` with V8's ``sourceURL`` comment: its errors and stack frames say ``name``
    instead of ``<anonymous>``."""
    safe = "".join(c if c.isalnum() or c in "._-/" else "_" for c in name)[:100] or "script"
    return f"{script}\n//# sourceURL={safe}"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""The embedded V8: calls, expressions, and errors that name the script and the line."""

from __future__ import annotations

import pytest

from scrapeflow.errors import JsError
from scrapeflow.js import JsRuntime

BANK_JS = """var SALT = 'k';
function cipher(password) {
  return password.split('').reverse().join('') + SALT;
}
function broken(form) {
  return form.fields.user;
}
"""


def test_eval_gives_values_as_python() -> None:
    runtime = JsRuntime(BANK_JS, names=["bank.js"])
    assert runtime.eval("cipher('abc')") == "cbak"
    assert runtime.eval("[1, 'a', {b: [true, null]}]") == [1, "a", {"b": [True, None]}]
    assert runtime.eval("var n = 2; n * 21") == 42
    assert runtime.eval("undefined") is None
    assert runtime.eval("cipher") is None  # a function is not a value JSON can give
    assert runtime.eval("SALT") == "k"


def test_errors_name_the_script_and_line_and_never_the_arguments() -> None:
    runtime = JsRuntime(BANK_JS, names=["bank.js"])
    with pytest.raises(JsError) as called:
        runtime.call("broken", {"secret": "hunter2"})
    assert str(called.value).startswith("JavaScript broken() failed: bank.js:6: TypeError")
    assert "hunter2" not in str(called.value)
    with pytest.raises(JsError, match=r"expression failed: expression:2: ReferenceError"):
        runtime.eval("var a = 1;\nnope(a)")
    with pytest.raises(JsError, match=r"login.js did not load: login.js:3: SyntaxError"):
        runtime.load("var a = 1;\nvar b = 2;\nvar c = ;", name="login.js")
    with pytest.raises(JsError, match=r"script-2.js did not load: script-2.js:1: ReferenceError"):
        JsRuntime("var ok = 1;", "missing()")

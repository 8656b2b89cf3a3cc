"""Does what a command printed fit the output its page shows?

The page's output is a template: ``…`` (or ``...``) stands for any text (with the commas around
it: ``{"a": 1, …}`` fits ``{"a":1}``). It must appear in what was printed, from the start of a
line to the end of a line (a page may show only the lines that matter, but ``3`` does not fit
``13``). Both sides are compared after the few changes listed in :data:`VARYING` — what differs
from run to run — and without spaces, and a line break may fall anywhere on either side, so
that a page may wrap a long JSON line and show ``{"a": 1}`` for the service's ``{"a":1}``. A
note after two spaces and a ``#`` is the page's, not output (``{"error": …}   # 401``).
"""

from __future__ import annotations

import re

__all__ = ["VARYING", "fits", "normalise"]

# What changes between two runs of the same example, and what it is replaced by on both sides.
VARYING: tuple[tuple[re.Pattern[str], str], ...] = (
    # times: 2026-11-24T04:03:52.194802+00:00, 2026-03-02 09:00:00Z, 20261124T040352Z
    (
        re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"),
        "<time>",
    ),
    (re.compile(r"\d{8}T\d{6}Z"), "<time>"),
    # ports of loopback servers: each run picks free ones
    (re.compile(r"(127\.0\.0\.\d+|localhost|\[::1\]):\d+"), r"\1:<port>"),
    # secrets made at random: API keys, webhook secrets
    (re.compile(r"\bsf_[A-Za-z0-9_-]+"), "<key>"),
    (re.compile(r"\bwhsec_[A-Za-z0-9_-]+"), "<secret>"),
    (re.compile(r"\bwh_[0-9a-f]+"), "wh_<id>"),
    # ids and digests: job ids, launch ids, hashes of URLs that hold a port
    (re.compile(r"\b[0-9a-f]{8,}\b"), "<hex>"),
    # durations measured: 0.42 s, 12 ms, "duration_ms": 4.2
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s)\b"), "<duration>"),
)
_NOTE = re.compile(r"\s{2,}#\s.*$", re.MULTILINE)
_WILDCARD = re.compile(r",?\s*(?:…|\.\.\.)\s*,?")  # with its commas: "a": 1, …}
_SPACE = re.compile(r"\s+")
_BLANKS = re.compile(r"[^\S\n]+")  # spaces, tabs, carriage returns: not line breaks
_BREAK = "\x00"  # a line break of the output, kept to find where lines start and end


def normalise(text: str) -> str:
    """``text`` with what varies replaced and no spaces."""
    for pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return _SPACE.sub("", text)


def _lines(text: str) -> str:
    """``text`` with what varies replaced, no spaces, and its line breaks as ``_BREAK``."""
    for pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return _BLANKS.sub("", text).replace("\n", _BREAK)


def _literal(part: str) -> str:
    """A regex for ``part`` as the output may wrap it: a line break allowed between any two
    characters (the page wraps a long line where the program did not, or the reverse)."""
    return f"{_BREAK}*".join(re.escape(char) for char in part)


def fits(expected: str, actual: str, *, notes: bool = True) -> bool:
    """True when ``actual`` holds the page's ``expected`` output (see the module's docstring):
    from the start of one of its lines to the end of one, so ``3`` does not fit ``13``."""
    if notes:
        expected = _NOTE.sub("", expected)
    parts = [normalise(part) for part in _WILDCARD.split(expected)]
    body = ".*?".join(_literal(part) for part in parts)
    pattern = f"(?:^|{_BREAK}){_BREAK}*{body}{_BREAK}*(?:{_BREAK}|$)"
    return re.search(pattern, _lines(actual), re.DOTALL) is not None

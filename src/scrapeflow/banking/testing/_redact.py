"""What a recording of a bank session must not keep, and how it is taken out.

A :class:`Redactor` learns the secrets of a whole session first — the login, password and
one-time code it was given, every value of a field with a secret's name (a query parameter, a
form or JSON field, an ``<input>``, an ``Authorization`` or ``X-…-Token`` header), every
cookie's value whatever its name,
every IBAN with a valid checksum — then replaces each one, everywhere it appears and in the
spellings it travels in (as is, URL-encoded, JSON- or HTML-escaped), by a placeholder:
``REDACTED-PASSWORD``, ``REDACTED-ACCESS-TOKEN-1``, or, for an IBAN, another IBAN of the same
country and length with valid check digits (a scraper that validates what it reads still
accepts it). One value gets one placeholder through the whole recording: a token a page gave
and the next request sent back still match when the recording is played.

What it cannot know is the author's to add: ``Redactor(fields=["dni"], values={"CARD": pan},
patterns=[r"\\b\\d{16}\\b"])``. Values shorter than :data:`MIN_SECRET` characters are taken out
only where a field of a password's kind (password, PIN, one-time code) holds them.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from schwifty import IBAN
from schwifty.exceptions import SchwiftyException

__all__ = [
    "MIN_SECRET",
    "SECRET_FIELD",
    "VOLATILE_FIELDS",
    "Redactor",
    "cookie_pairs",
    "json_fields",
    "normalized_name",
]

MIN_SECRET = 6
"""Shortest value of a field with a secret's name taken out everywhere it appears (shorter
ones would hit amounts and dates); a password, PIN or code field's value is taken out from 4."""
_MIN_PASSWORD_LIKE = 4

SECRET_FIELD = re.compile(
    r".*(?:token|secret|password|passwd|passcode|session|csrf|xsrf|apikey|signature"
    r"|verifier|credential|cookie|authorization|sesion|clave|contrasena|firma|jwt|ticket|saml"
    r"|smscode|otpcode|authcode|mfacode|securitycode|verificationcode|onetimecode).*"
    r"|pass|pwd|pin|otp|code|sid|nonce|auth|challenge|jsessionid|phpsessid"
    r"|x?(?:auth|api|access|session)(?:key|id)"
)
"""Field and header names (lower case, ``-`` and ``_`` removed) whose values are secrets: any
name holding one of the first words (``smsCode``, ``sessionKey``, ``SAMLResponse``,
``X-Auth-Token``; Spanish banks' ``clave``, ``contraseña`` and ``firma`` among them), or one of
the short ones whole."""
_PASSWORD_LIKE = re.compile(
    r"pass|passwd|passcode|pwd|pin|otp|code|.*(?:password|clave|otp)"
    r"|.*(?:sms|otp|mfa|auth|security|verification|onetime)code"
)

VOLATILE_FIELDS = frozenset(
    {"state", "nonce", "codechallenge", "codeverifier", "timestamp", "ts", "_", "rnd", "cb"}
)
"""Fields whose values a scraper makes anew each run (PKCE, OAuth ``state``, cache busters):
ignored when a request is matched against a recording."""

_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:(?:[ \u00a0-]|&nbsp;)?[A-Z0-9]){11,30}")
_IBAN_SEPARATORS = re.compile(r"[ \u00a0-]|&nbsp;")
_SHORTEST_IBAN = 15
_INPUT = re.compile(r"<input\b[^>]*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""\b(name|value)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.I)


def normalized_name(name: str) -> str:
    """A field's name as the rules see it: lower case, without ``-`` and ``_``."""
    return name.lower().replace("-", "").replace("_", "")


@dataclass
class Redactor:
    """Learns a session's secrets (:meth:`learn_*`), then takes them out (:meth:`apply`).

    >>> redactor = Redactor(known={"PASSWORD": "hunter22"})
    >>> redactor.learn_query("https://bank.example/cb?code=4f9a2c7e&state=x")
    >>> redactor.apply("pw=hunter22&code=4f9a2c7e")
    'pw=REDACTED-PASSWORD&code=REDACTED-CODE-1'
    """

    known: Mapping[str, str] = field(default_factory=dict)
    """Values given to the session (``{"PASSWORD": …, "LOGIN": …, "OTP": …}``), by name."""
    fields: Iterable[str] = ()
    """More field names whose values are secrets (as given; matched like :data:`SECRET_FIELD`)."""
    values: Mapping[str, str] = field(default_factory=dict)
    """More values to take out, by the name their placeholder takes."""
    patterns: Iterable[str] = ()
    """Regular expressions: whatever they match is taken out."""
    ibans: bool = True
    """Replace every IBAN by another of its country (checksums valid)."""

    def __post_init__(self) -> None:
        self._fields = {normalized_name(name) for name in self.fields}
        self._patterns = [re.compile(pattern) for pattern in self.patterns]
        self._by_value: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._compiled: re.Pattern[str] | None = None
        for name, value in {**self.known, **self.values}.items():
            if value:
                self._by_value[value] = f"REDACTED-{_label(name)}"

    # -- learning ------------------------------------------------------------------------

    def add(self, name: str, value: str) -> None:
        """Take ``value`` out as ``REDACTED-<NAME>`` (a value learnt late: a code typed)."""
        if value:
            self._by_value[value] = f"REDACTED-{_label(name)}"
            self._compiled = None

    def is_secret_field(self, name: str) -> bool:
        norm = normalized_name(name)
        return norm in self._fields or SECRET_FIELD.fullmatch(norm) is not None

    def learn(self, name: str, value: object, *, secret: bool = False) -> None:
        """``value`` of a field called ``name``: kept as a secret when the name says so (or
        ``secret``: a cookie's value, whatever its name)."""
        if not isinstance(value, str | int) or isinstance(value, bool):
            return
        text = str(value)
        if not (secret or self.is_secret_field(name)):
            return
        if text in self._by_value or text.startswith("REDACTED"):
            return
        shortest = (
            _MIN_PASSWORD_LIKE if _PASSWORD_LIKE.fullmatch(normalized_name(name)) else MIN_SECRET
        )
        if len(text) < shortest:
            return
        label = _label(name)
        self._counts[label] = self._counts.get(label, 0) + 1
        self._by_value[text] = f"REDACTED-{label}-{self._counts[label]}"
        self._compiled = None

    def learn_pairs(self, pairs: Iterable[tuple[str, object]]) -> None:
        for name, value in pairs:
            self.learn(name, value)

    def learn_query(self, url: str) -> None:
        """The fields of ``url``'s query, and of its fragment (``#access_token=…``, OAuth's
        implicit flow)."""
        parts = urlsplit(url)
        self.learn_pairs(parse_qsl(parts.query, keep_blank_values=True))
        if "=" in parts.fragment:
            self.learn_pairs(parse_qsl(parts.fragment, keep_blank_values=True))

    def learn_headers(self, headers: Iterable[tuple[str, str]]) -> None:
        for name, value in headers:
            lower = name.lower()
            if lower in ("cookie", "set-cookie"):
                for cookie, cookie_value in cookie_pairs(value, set_cookie=lower == "set-cookie"):
                    self.learn(cookie, cookie_value, secret=True)
            elif lower in ("authorization", "proxy-authorization"):
                _, _, credentials = value.partition(" ")
                self.learn("authorization", credentials or value)
            elif lower == "location":
                self.learn_query(value)
            else:
                self.learn(name, value)

    def learn_body(self, body: str, content_type: str = "") -> None:
        """The fields of a JSON, form or HTML body (whichever it turns out to be)."""
        stripped = body.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                self.learn_pairs(json_fields(json.loads(body)))
                return
            except ValueError:
                pass
        if "x-www-form-urlencoded" in content_type or (
            "=" in body and "<" not in body and " " not in body.strip()
        ):
            self.learn_pairs(parse_qsl(body, keep_blank_values=True))
        if "<" in body:
            for tag in _INPUT.finditer(body):
                attributes = {
                    m.group(1).lower(): html.unescape(m.group(2) or m.group(3) or m.group(4) or "")
                    for m in _ATTRIBUTE.finditer(tag.group(0))
                }
                if "name" in attributes and "value" in attributes:
                    self.learn(attributes["name"], attributes["value"])

    def learn_ibans(self, text: str) -> None:
        if not self.ibans:
            return
        for found in _IBAN.finditer(text):
            iban = _iban_at_start(_IBAN_SEPARATORS.sub("", found.group(0)))
            if iban is None or iban.compact in self._by_value:
                continue
            fake = _fake_iban(iban)
            for original, replacement in _iban_spellings(iban, fake):
                self._by_value.setdefault(original, replacement)
            self._compiled = None

    # -- taking out ----------------------------------------------------------------------

    def apply(self, text: str) -> str:
        """``text`` with every learnt secret (in each of its spellings) replaced."""
        if not text:
            return text
        pattern = self._pattern()
        if pattern is not None:
            table = self._table()
            text = pattern.sub(lambda m: table[m.group(0)], text)
        for extra in self._patterns:
            text = extra.sub("REDACTED", text)
        return text

    def placeholders(self) -> dict[str, str]:
        """Each secret's placeholder, by the secret (for tests: never write this out)."""
        return dict(self._by_value)

    def _table(self) -> dict[str, str]:
        table: dict[str, str] = {}
        for value, placeholder in self._by_value.items():
            for spelled, replaced in _spellings(value, placeholder):
                table.setdefault(spelled, replaced)
        return table

    def _pattern(self) -> re.Pattern[str] | None:
        if self._compiled is None and self._by_value:
            # Longest first: a token that holds another is replaced whole.
            spellings = sorted(self._table(), key=len, reverse=True)
            self._compiled = re.compile("|".join(_bounded(s) for s in spellings))
        return self._compiled


def _bounded(spelled: str) -> str:
    """The pattern of a secret's spelling; a short one only where it stands alone (not the
    ``1000`` of an amount ``-1000.50``, nor part of a longer word or number)."""
    if len(spelled) >= _STANDS_ALONE:
        return re.escape(spelled)
    return rf"(?<![\w.,]){re.escape(spelled)}(?![\w.,])"


_STANDS_ALONE = 8
"""Spellings at least this long are replaced wherever they appear."""


def _label(name: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "-", name.upper()).strip("-") or "VALUE"


def _spellings(value: str, placeholder: str) -> Iterator[tuple[str, str]]:
    yield value, placeholder
    for encode in (_url_encoded, _form_encoded, _json_escaped, _html_escaped):
        spelled = encode(value)
        if spelled != value:
            yield spelled, encode(placeholder)


def _url_encoded(value: str) -> str:
    return quote(value, safe="")


def _form_encoded(value: str) -> str:
    return quote_plus(value, safe="")


def _json_escaped(value: str) -> str:
    return json.dumps(value)[1:-1]


def _html_escaped(value: str) -> str:
    return html.escape(value, quote=True)


def cookie_pairs(header: str, *, set_cookie: bool) -> list[tuple[str, str]]:
    """The cookies of a ``Cookie`` header, or the one a ``Set-Cookie`` sets, split by hand: a
    parser that gives up on one odd cookie would leave every other one in the recording."""
    parts = header.split(";")[:1] if set_cookie else header.split(";")
    found = []
    for part in parts:
        name, equals, value = part.strip().partition("=")
        if equals and name.strip():
            found.append((name.strip(), value.strip().strip('"')))
    return found


def json_fields(value: object, name: str = "") -> Iterator[tuple[str, object]]:
    """Each ``(field name, value)`` of a JSON document, at any depth (a list's items under
    the list's name)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from json_fields(inner, str(key))
    elif isinstance(value, list):
        for inner in value:
            yield from json_fields(inner, name)
    elif name:
        yield name, value


def _fake_iban(iban: IBAN) -> str:
    """Another IBAN of ``iban``'s country and length, its check digits valid, the same for
    the same IBAN (a digit for a digit, a letter for a letter)."""
    seed = hashlib.sha256(iban.compact.encode()).digest()
    bban = "".join(
        str(seed[n % len(seed)] % 10)
        if char.isdigit()
        else chr(ord("A") + seed[n % len(seed)] % 26)
        for n, char in enumerate(iban.bban)
    )
    country = iban.country_code
    digits = "".join(str(int(c, 36)) for c in f"{bban}{country}00")
    check = 98 - int(digits) % 97
    return f"{country}{check:02d}{bban}"


def _iban_at_start(compact: str) -> IBAN | None:
    """The valid IBAN ``compact`` starts with (what follows it may be more letters: "… EUR",
    a reference), or None."""
    for length in range(min(len(compact), 34), _SHORTEST_IBAN - 1, -1):
        try:
            return IBAN(compact[:length])
        except SchwiftyException:
            continue
    return None


def _iban_spellings(iban: IBAN, fake: str) -> Iterator[tuple[str, str]]:
    """Each way a page may write ``iban``, with ``fake`` written the same way: compact, in
    groups of four (spaces, non-breaking spaces, ``&nbsp;``, hyphens), its BBAN, and a Spanish
    one's CCC (4-4-2-10)."""
    fake_iban = IBAN(fake)
    yield iban.compact, fake_iban.compact
    for separator in (" ", "\u00a0", "&nbsp;", "-"):
        yield iban.formatted.replace(" ", separator), fake_iban.formatted.replace(" ", separator)
    bban, fake_bban = str(iban.bban), str(fake_iban.bban)
    yield bban, fake_bban
    if iban.country_code == "ES" and len(bban) == 20:
        for separator in (" ", "-"):
            yield _ccc(bban, separator), _ccc(fake_bban, separator)


def _ccc(bban: str, separator: str) -> str:
    return separator.join((bban[:4], bban[4:8], bban[8:10], bban[10:]))

"""Database errors that mean "this database cannot be used as it is", told apart from the rest.

A corrupt SQLite file, a file that is not a database, a read-only database, a role without the
right to write: none of these is a bug or a passing failure, and retrying changes nothing. They
are bad configuration, like a wrong URL: :func:`database_errors` turns them into a one-line
:class:`~scrapeflow.errors.ConfigError` naming the database. Every other error passes unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from scrapeflow.errors import ConfigError, FetchError

__all__ = ["connection_lost", "database_errors", "shown_url", "unusable_reason"]

# SQLite's primary result codes (extended codes start with them: SQLITE_READONLY_DBMOVED…).
_SQLITE = {
    "SQLITE_CORRUPT": "is corrupt",
    "SQLITE_NOTADB": "is not a SQLite database",
    "SQLITE_READONLY": "is read-only",
    "SQLITE_CANTOPEN": "cannot be opened",
    "SQLITE_PERM": "refuses access",
    "SQLITE_AUTH": "refuses access",
}
# PostgreSQL SQLSTATEs (asyncpg, psycopg).
_SQLSTATES = {
    "25006": "is read-only",  # read_only_sql_transaction
    "42501": "refuses access",  # insufficient_privilege
    "3D000": "does not exist",  # invalid_catalog_name
    "28000": "refuses access",  # invalid_authorization_specification
    "28P01": "refuses access",  # invalid_password
}


# SQLSTATEs of a server going away: class 08 (connection exception), and admin_shutdown,
# crash_shutdown, cannot_connect_now (a server stopping, restarting or starting up).
_LOST_SQLSTATES = ("08", "57P01", "57P02", "57P03")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc``, or what caused it (``raise … from``), is the database going away (a
    connection refused, cut or closed; the server shutting down or starting up), rather than
    an error of the statement: trying again later may work. A fetch's connection error (a
    bank's, a site's: :class:`~scrapeflow.errors.FetchError`) is not the database's."""
    psycopg = sys.modules.get("psycopg")  # loaded where procrastinate is
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen or isinstance(current, FetchError):
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        sqlstate = getattr(current, "sqlstate", None)
        if (
            (isinstance(current, DBAPIError) and current.connection_invalidated)
            or isinstance(current, ConnectionError)
            or (isinstance(sqlstate, str) and sqlstate.startswith(_LOST_SQLSTATES))
            or (
                psycopg is not None
                and isinstance(current, psycopg.OperationalError)
                and sqlstate is None
            )
        ):
            return True
        if current.__cause__ is not None:
            pending.append(current.__cause__)
    return False


def unusable_reason(exc: BaseException) -> str | None:
    """What makes the database unusable, as the end of a sentence ("is read-only (attempt to
    write a readonly database)"); None when ``exc`` says nothing of the kind."""
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    said = _first_line(orig)
    name = str(getattr(orig, "sqlite_errorname", "") or "")
    for code, reason in _SQLITE.items():
        if name == code or name.startswith(code + "_"):
            return f"{reason} ({said})"
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _SQLSTATES:
        return f"{_SQLSTATES[str(state)]} ({said})"
    return None


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Inside, an error saying the database at ``url`` cannot be used becomes a
    :class:`~scrapeflow.errors.ConfigError` naming it (never its password).

    >>> with database_errors(url):  # doctest: +SKIP
    ...     await add_customer(sessions, "ana")
    """
    try:
        yield
    except DBAPIError as exc:
        reason = unusable_reason(exc)
        if reason is None:
            raise
        raise ConfigError(f"the database {shown_url(url)} {reason}") from None


def shown_url(url: str) -> str:
    """``url`` as it may be shown: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(an unreadable URL)"


def _first_line(error: BaseException | None) -> str:
    lines = str(error or "").strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:200]

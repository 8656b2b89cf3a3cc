"""A scrape stopped by the database, not the bank, ends ``not_stored`` (it was ``unknown``,
which the docs call a bug): the access's data is not up to date and the next refresh reads it
again; the refresh's outcome counts it as a failure, never as something for a person."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from scrapeflow.banking import Outcome, ResultCode, outcome_of, result_for
from scrapeflow.db import create_engine
from scrapeflow.errors import ConnectionFailed, ResultsNotStored
from tests._tinyproxy import free_port


async def database_error() -> Exception:
    """What a write raises when its PostgreSQL is not there (a port nobody listens on)."""
    engine = create_engine(f"postgresql+asyncpg://scrapeflow@127.0.0.1:{free_port()}/gone")
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
    raise AssertionError("a database on a closed port answered")


async def test_a_database_that_failed_is_not_stored_not_unknown() -> None:
    failed = await database_error()
    code, detail = result_for(failed)
    assert code is ResultCode.NOT_STORED, (type(failed), failed)
    assert detail and "password" not in detail
    # inside a task group, as a scraper's concurrent steps raise it
    assert result_for(ExceptionGroup("steps", [failed]))[0] is ResultCode.NOT_STORED
    lost = ResultsNotStored("the refresh of ana could not store its movements")
    assert result_for(lost)[0] is ResultCode.NOT_STORED


def test_the_bank_failing_is_still_the_banks() -> None:
    down = ConnectionFailed("connection refused", url="http://bank.example/", attempts=3)
    assert result_for(down)[0] is ResultCode.BANK_UNAVAILABLE
    assert result_for(ValueError("a bug"))[0] is ResultCode.UNKNOWN


@pytest.mark.parametrize(
    ("codes", "outcome"),
    [
        ([ResultCode.SUCCESS, ResultCode.NOT_STORED], Outcome.PARTIAL),
        ([ResultCode.NOT_STORED], Outcome.FAILED),
    ],
)
def test_not_stored_is_a_failure_of_the_refresh(codes: list[ResultCode], outcome: Outcome) -> None:
    assert outcome_of(codes) is outcome
    assert not ResultCode.NOT_STORED.ok
    assert "database" in ResultCode.NOT_STORED.message


def test_a_driver_error_is_wrapped_as_sqlalchemy_does() -> None:
    # The launcher sees SQLAlchemy's wrapper, whatever the driver: a DBAPIError.
    wrapped = DBAPIError("INSERT INTO movements …", None, OSError("connection reset"))
    assert result_for(wrapped)[0] is ResultCode.NOT_STORED

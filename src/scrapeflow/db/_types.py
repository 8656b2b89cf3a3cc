"""Column types that keep the rules of DESIGN.md on every dialect: exact money, UTC times."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, DateTime, Dialect, Numeric
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["Money", "UTCDateTime"]

_CENT = Decimal("0.01")


class Money(TypeDecorator[Decimal]):
    """``Numeric(18, 2)`` holding :class:`~decimal.Decimal`, exact to the cent on every dialect.

    SQLite has no decimal type (SQLAlchemy would go through ``float``), so there the value is
    stored as an integer number of cents; elsewhere as ``NUMERIC(18, 2)``. Values with more than
    two decimals are refused rather than rounded silently.
    """

    impl = Numeric(18, 2)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(18, 2, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, Decimal):
            raise TypeError(f"money must be a Decimal, not {type(value).__name__}")
        cents = value.quantize(_CENT)
        if cents != value:
            raise ValueError(f"money has more than two decimals: {value}")
        if dialect.name == "sqlite":
            return int(cents * 100)
        return cents

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-2)  # cents: exact, two places (0 -> 0.00)
        return Decimal(value).quantize(_CENT)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware instant, stored in UTC; naive datetimes are refused on the way in.

    SQLite keeps no offset, so values read back without one are UTC by construction.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: give a timezone (UTC)")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

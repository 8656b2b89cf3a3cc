from __future__ import annotations

from datetime import UTC, date
from decimal import Decimal
from typing import cast

import pytest
from sqlalchemy import Table, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import (
    Account,
    AccountRecord,
    AccountType,
    Movement,
    MovementRecord,
    SqlWriter,
    movement_key,
    upsert_accounts,
    upsert_movements,
)
from scrapeflow.db import session_factory, upsert

IBAN = "ES9121000418450200051332"


def accounts() -> list[AccountRecord]:
    return [
        AccountRecord("A1", AccountType.CHECKING, "EUR", Decimal("1234.56"), iban=IBAN),
        AccountRecord("C1", AccountType.CARD, "EUR", Decimal("-80.10"), number="4111-XXXX-0001"),
    ]


def movements(*, posted: bool = False) -> list[MovementRecord]:
    card = MovementRecord(
        movement_key(reference="R-3"),
        date(2026, 3, 2),
        date(2026, 3, 4) if posted else date(2026, 3, 2),
        Decimal("-19.99"),
        "COMPRA MERCADONA MADRID" if posted else "PENDIENTE MERCADONA",
        pending=not posted,
    )
    return [
        MovementRecord(
            movement_key(reference="R-1"),
            date(2026, 3, 1),
            date(2026, 3, 1),
            Decimal("2500.00"),
            "NOMINA ACME",
            balance_after=Decimal("3734.56"),
        ),
        MovementRecord(
            movement_key(reference="R-2"),
            date(2026, 3, 1),
            date(2026, 3, 1),
            Decimal("-0.01"),
            "REDONDEO",
            balance_after=Decimal("3734.55"),
        ),
        card,
    ]


async def _rows(session: AsyncSession, model: type[Account] | type[Movement]) -> list[tuple]:
    result = await session.execute(select(model).order_by(model.id))
    return [tuple(getattr(obj, c.key) for c in model.__table__.columns) for obj in result.scalars()]


async def test_upsert_accounts_twice_gives_the_same_rows(session: AsyncSession, access_id: int):
    ids = await upsert_accounts(session, access_id, accounts())
    await session.commit()
    first = await _rows(session, Account)
    session.expunge_all()
    assert await upsert_accounts(session, access_id, accounts()) == ids
    await session.commit()
    session.expunge_all()
    assert await _rows(session, Account) == first
    assert set(ids) == {"A1", "C1"} and len(first) == 2


async def test_an_account_balance_change_is_an_update(session: AsyncSession, access_id: int):
    ids = await upsert_accounts(session, access_id, accounts())
    changed = AccountRecord("A1", AccountType.CHECKING, "EUR", Decimal("99.00"), iban=IBAN)
    await upsert_accounts(session, access_id, [changed])
    await session.commit()
    session.expunge_all()
    stored = await session.get(Account, ids["A1"])
    assert stored is not None and stored.balance == Decimal("99.00")
    assert await session.scalar(select(func.count()).select_from(Account)) == 2


async def test_upsert_movements_twice_gives_the_same_rows(session: AsyncSession, access_id: int):
    account_id = (await upsert_accounts(session, access_id, accounts()))["A1"]
    await upsert_movements(session, account_id, movements())
    await session.commit()
    session.expunge_all()
    first = await _rows(session, Movement)
    await upsert_movements(session, account_id, movements())
    await session.commit()
    session.expunge_all()
    assert await _rows(session, Movement) == first  # updated_at included: no-op means no touch
    assert len(first) == 3


@pytest.mark.parametrize("portable", [False, True], ids=["on_conflict", "select_then_write"])
async def test_pending_that_posts_with_a_new_description_is_updated_not_doubled(
    session: AsyncSession, access_id: int, portable: bool
):
    account_id = (await upsert_accounts(session, access_id, accounts()))["A1"]
    if portable:  # the path MS SQL Server takes, exercised here on a real database
        rows = [
            _row(account_id, m) | {"first_version": 1, "changed_version": 1} for m in movements()
        ]
        await upsert(
            session,
            _table(),
            rows,
            keys=("account_id", "movement_key"),
            touch="updated_at",
            stamps=("changed_version",),
            insert_only=("first_version",),
            portable=True,
        )
    else:
        await upsert_movements(session, account_id, movements(), version=1)
    await session.commit()
    session.expunge_all()
    before = await session.scalar(select(Movement).where(Movement.movement_key == "ref:R-3"))
    assert before is not None and before.pending
    session.expunge_all()

    if portable:
        rows = [
            _row(account_id, m) | {"first_version": 2, "changed_version": 2}
            for m in movements(posted=True)
        ]
        await upsert(
            session,
            _table(),
            rows,
            keys=("account_id", "movement_key"),
            touch="updated_at",
            stamps=("changed_version",),
            insert_only=("first_version",),
            portable=True,
        )
    else:
        await upsert_movements(session, account_id, movements(posted=True), version=2)
    await session.commit()
    session.expunge_all()

    stored = (await session.scalars(select(Movement).order_by(Movement.id))).all()
    assert len(stored) == 3
    card = next(m for m in stored if m.movement_key == "ref:R-3")
    assert card.id == before.id
    assert (card.pending, card.description, card.value_date) == (
        False,
        "COMPRA MERCADONA MADRID",
        date(2026, 3, 4),
    )
    assert card.first_seen == before.first_seen
    assert card.updated_at > before.updated_at
    assert card.first_seen.tzinfo is UTC
    # The sync versions: the change is marked with the second write's, the first stays.
    assert (card.first_version, card.changed_version) == (1, 2)
    assert {(m.first_version, m.changed_version) for m in stored if m is not card} == {(1, 1)}


async def test_money_round_trips_to_the_cent(session: AsyncSession, access_id: int):
    big = Decimal("9999999999999999.99")  # the largest Numeric(18, 2)
    record = AccountRecord("BIG", AccountType.SAVINGS, "EUR", big, iban=IBAN)
    ids = await upsert_accounts(session, access_id, [record])
    values = [Decimal("-0.01"), Decimal("0.10"), Decimal("-1234567890123456.78")]
    await upsert_movements(
        session,
        ids["BIG"],
        [
            MovementRecord(f"k{i}", date(2026, 1, 1), date(2026, 1, 1), v, "x", balance_after=v)
            for i, v in enumerate(values)
        ],
    )
    await session.commit()
    session.expunge_all()
    account = await session.get(Account, ids["BIG"])
    assert account is not None and account.balance == big
    assert str(account.balance) == "9999999999999999.99"
    stored = (await session.scalars(select(Movement).order_by(Movement.movement_key))).all()
    assert [m.amount for m in stored] == values
    assert [m.balance_after for m in stored] == values
    assert all(isinstance(m.amount, Decimal) for m in stored)


async def test_money_with_sub_cent_digits_is_refused(session: AsyncSession, access_id: int):
    record = AccountRecord("X", AccountType.OTHER, "EUR", Decimal("1.005"), number="N1")
    with pytest.raises(Exception, match="more than two decimals"):
        await upsert_accounts(session, access_id, [record])


def test_hash_fallback_key_is_stable_and_distinguishes_repeats():
    a = movement_key(
        operation_date=date(2026, 1, 2), amount=Decimal("-3.50"), description="CAFE  X"
    )
    b = movement_key(operation_date=date(2026, 1, 2), amount=Decimal("-3.5"), description="cafe x")
    c = movement_key(
        operation_date=date(2026, 1, 2), amount=Decimal("-3.50"), description="CAFE X", occurrence=1
    )
    assert a == b != c
    assert a.startswith("h:") and len(a) <= 128


def _table() -> Table:
    return cast(Table, Movement.__table__)


def _row(account_id: int, m: MovementRecord) -> dict:
    return {
        "account_id": account_id,
        "movement_key": m.key,
        "operation_date": m.operation_date,
        "value_date": m.value_date,
        "amount": m.amount,
        "description": m.description,
        "balance_after": m.balance_after,
        "pending": m.pending,
    }


async def test_pending_movements_the_bank_dropped_are_forgotten(
    session: AsyncSession, access_id: int
) -> None:
    """A cancelled card authorisation vanishes from the bank: after a complete read of its
    window it vanishes here too. Booked movements and older pending ones are kept."""
    writer = SqlWriter(session_factory(session.bind))
    await writer.write_accounts(access_id, accounts())
    day = date(2026, 3, 1)

    def move(key: str, *, pending: bool, on: date = day) -> MovementRecord:
        return MovementRecord(key, on, on, Decimal("-5.00"), f"M {key}", pending=pending)

    await writer.write_movements(
        access_id,
        "A1",
        [
            move("ref:gone", pending=True),
            move("ref:kept", pending=True),
            move("ref:booked", pending=False),
            move("ref:old", pending=True, on=date(2026, 2, 1)),
        ],
    )
    # the bank's complete list from `day` on: "gone" is not in it any more, "new" is
    complete = [move("ref:kept", pending=True), move("ref:new", pending=False)]
    dropped = await writer.write_movements_since(access_id, "A1", complete, day)
    assert dropped == 1
    keys = set(
        (
            await session.scalars(
                select(Movement.movement_key).execution_options(populate_existing=True)
            )
        ).all()
    )
    assert keys == {"ref:kept", "ref:booked", "ref:old", "ref:new"}

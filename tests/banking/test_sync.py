"""The sync cursor: added, modified and removed since a cursor, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
from datetime import date
from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from scrapeflow.banking import (
    AccountRecord,
    AccountType,
    MovementChanges,
    MovementRecord,
    SqlWriter,
    movement_changes,
    movement_key,
)
from scrapeflow.banking._sync import encode_cursor
from scrapeflow.db import session_factory
from scrapeflow.errors import InputError

IBAN = "ES9121000418450200051332"
SINCE = date(2026, 3, 1)


def booked(ref: str, day: int, amount: str) -> MovementRecord:
    return MovementRecord(
        movement_key(reference=ref),
        date(2026, 3, day),
        date(2026, 3, day),
        Decimal(amount),
        f"RECIBO {ref}",
        balance_after=Decimal("100.00"),
    )


def pending(ref: str, day: int, amount: str, *, posted: bool = False) -> MovementRecord:
    return MovementRecord(
        movement_key(reference=ref),
        date(2026, 3, day),
        date(2026, 3, day + (2 if posted else 0)),
        Decimal(amount),
        f"COMPRA {ref}" if posted else f"PENDIENTE {ref}",
        pending=not posted,
    )


def keys(changes: MovementChanges) -> tuple[set[str], set[str], set[str]]:
    return (
        {m.key for m in changes.added},
        {m.key for m in changes.modified},
        {r.key for r in changes.removed},
    )


@pytest.fixture
async def writer(session: AsyncSession, access_id: int) -> SqlWriter:
    engine = session.bind
    assert engine is not None
    target = SqlWriter(session_factory(engine))  # type: ignore[arg-type]
    await target.write_accounts(
        access_id,
        [AccountRecord("A1", AccountType.CHECKING, "EUR", Decimal("100.00"), iban=IBAN)],
    )
    return target


async def test_a_client_gets_each_change_once_added_modified_removed(
    writer: SqlWriter, access_id: int
) -> None:
    sessions = session_factory(writer.engine)
    first = [booked("B1", 1, "-10.00"), pending("P1", 2, "-5.50"), pending("P2", 2, "-7.25")]
    await writer.write_movements_since(access_id, "A1", first, SINCE)

    start = await movement_changes(sessions, "c-1")
    assert keys(start) == ({m.key for m in first}, set(), set())
    assert not start.has_more
    [card] = [m for m in start.added if m.key == movement_key(reference="P1")]
    assert (card.amount, card.pending, card.account, card.bank) == (
        Decimal("-5.50"),
        True,
        IBAN,
        "formbank",
    )

    # Nothing new: nothing comes, and the cursor stays usable.
    quiet = await movement_changes(sessions, "c-1", cursor=start.next_cursor)
    assert keys(quiet) == (set(), set(), set())

    # P1 posts, P2 is withdrawn, B2 arrives; the same batch written twice changes nothing more.
    second = [
        booked("B1", 1, "-10.00"),
        pending("P1", 2, "-5.50", posted=True),
        booked("B2", 3, "4.00"),
    ]
    assert await writer.write_movements_since(access_id, "A1", second, SINCE) == 1
    assert await writer.write_movements_since(access_id, "A1", second, SINCE) == 0
    delta = await movement_changes(sessions, "c-1", cursor=quiet.next_cursor)
    assert keys(delta) == (
        {movement_key(reference="B2")},
        {movement_key(reference="P1")},
        {movement_key(reference="P2")},
    )
    [posted] = delta.modified
    assert (posted.pending, posted.description) == (False, "COMPRA P1")
    assert keys(await movement_changes(sessions, "c-1", cursor=delta.next_cursor)) == (
        set(),
        set(),
        set(),
    )

    # From the first cursor straight to now: P2 came and went in between, so it is not there
    # at all; the rest is added as it is now.
    fresh = await movement_changes(sessions, "c-1")
    assert keys(fresh) == ({m.key for m in second}, set(), set())


async def test_pages_end_on_whole_batches_and_add_up_to_what_is_stored(
    writer: SqlWriter, access_id: int
) -> None:
    sessions = session_factory(writer.engine)
    for day in range(1, 11):  # ten batches of three
        batch = [booked(f"D{day}-{n}", day, f"-{n}.00") for n in range(1, 4)]
        await writer.write_movements(access_id, "A1", batch)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await movement_changes(sessions, "c-1", cursor=cursor, count=4)
        pages += 1
        assert len(page.added) in (6, 3)  # 4 rounds up to the end of the second batch
        seen += [m.key for m in page.added]
        cursor = page.next_cursor
        if not page.has_more:
            break
    assert pages == 5
    assert len(seen) == len(set(seen)) == 30


async def test_concurrent_writers_of_one_customer_never_let_a_change_slip_past_a_cursor(
    writer: SqlWriter, access_id: int
) -> None:
    """Writers race a reader that syncs all along: what the reader collects is what is stored,
    each movement once (versions of one customer commit in order)."""
    sessions = session_factory(writer.engine)
    await writer.write_accounts(
        access_id,
        [AccountRecord("A2", AccountType.SAVINGS, "EUR", Decimal("5.00"), iban=None, number="9")],
    )

    async def write(account: str) -> None:
        for day in range(1, 21):
            batch = [booked(f"{account}-{day}", day, "1")]
            await writer.write_movements(access_id, account, batch)

    collected: dict[str, int] = {}
    cursor: str | None = None
    writers = asyncio.gather(write("A1"), write("A2"))
    while True:
        page = await movement_changes(sessions, "c-1", cursor=cursor)
        for m in page.added:
            collected[m.key] = collected.get(m.key, 0) + 1
        cursor = page.next_cursor
        if writers.done() and not page.has_more:
            page = await movement_changes(sessions, "c-1", cursor=cursor)
            for m in page.added:
                collected[m.key] = collected.get(m.key, 0) + 1
            break
        await asyncio.sleep(0)
    await writers
    assert len(collected) == 40
    assert set(collected.values()) == {1}


async def test_a_cursor_it_did_not_give_is_refused(writer: SqlWriter) -> None:
    sessions = session_factory(writer.engine)
    past_64_bits = base64.urlsafe_b64encode(f"v2:{2**64}:x".encode()).decode()
    bad_cursors = (
        "nope",
        encode_cursor(10**6, "c-1"),  # ahead of the data
        "djE6LTE",
        "x" * 40,
        encode_cursor(0, "c-2"),  # another customer's
        past_64_bits,
        base64.urlsafe_b64encode(f"v1:{2**64}".encode()).decode(),
    )
    for bad in bad_cursors:
        with pytest.raises(InputError, match="cursor"):
            await movement_changes(sessions, "c-1", cursor=bad)

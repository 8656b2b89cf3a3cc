"""The banks' ground truth: deterministic, valid IBANs, pending movements that post, on demand."""

from __future__ import annotations

import tracemalloc
from datetime import timedelta

import pytest
from schwifty import IBAN

from scrapeflow.sandbox._clock import SandboxClock
from scrapeflow.sandbox._world import BANKS, AccountKind, World


def test_same_seed_same_data_other_seed_other_data() -> None:
    clock = SandboxClock()
    a, b, c = World(1), World(1), World(2)
    for bank in BANKS:
        assert a.login(bank, 77) == b.login(bank, 77)
        assert a.login(bank, 77).password != c.login(bank, 77).password
        acc_a, acc_b = a.accounts(bank, 77), b.accounts(bank, 77)
        assert acc_a == acc_b
        assert a.movements(acc_a[0], clock.now()) == b.movements(acc_b[0], clock.now())


def test_ibans_are_valid_and_cards_have_none() -> None:
    world = World(0)
    kinds = set()
    for customer in range(1, 60):
        for bank in BANKS:
            for account in world.accounts(bank, customer):
                kinds.add(account.kind)
                if account.kind is AccountKind.CARD:
                    assert account.iban is None and "****" in account.number
                else:
                    assert IBAN(account.iban).country_code == "ES"  # raises if the checksum fails
    assert kinds == set(AccountKind)


def test_traits_follow_the_documented_rules() -> None:
    world = World(0)
    assert world.login("formbank", 13).locked and not world.login("formbank", 14).locked
    assert world.login("legacybank", 6).otp_required and not world.login("apibank", 6).otp_required
    assert len(world.accounts("apibank", 57)) == 32
    for bank in BANKS:
        login = world.login(bank, 4321)
        assert world.customer_of(bank, login.username) == 4321
    assert world.customer_of("formbank", "00000042X") is None  # wrong NIF letter
    with pytest.raises(ValueError, match="no customer"):
        world.login("formbank", 10_001)


def test_movements_appear_and_pending_ones_post_with_the_same_ref() -> None:
    clock = SandboxClock()
    world = World(0)
    account = next(a for a in world.accounts("formbank", 42) if a.kind is not AccountKind.SAVINGS)
    before = {m.ref: m for m in world.movements(account, clock.now())}
    pending = [m for m in before.values() if m.pending]
    clock.advance(timedelta(days=5))
    after = {m.ref: m for m in world.movements(account, clock.now())}
    assert set(before) < set(after), "new movements appear as the clock moves"
    assert all(not after[m.ref].pending for m in pending), "pending movements post within 3 days"
    changed = [m for m in pending if after[m.ref].description != m.description]
    assert len(changed) == len(pending)
    assert all(after[m.ref].value_date > m.value_date for m in pending)
    booked = [m for m in after.values() if not m.pending]
    balance = account.opening_balance + sum(m.amount for m in booked)
    assert world.balance(account, clock.now()) == balance == booked[-1].balance_after


def test_pending_exists_somewhere_now() -> None:
    world, clock = World(0), SandboxClock()
    pending = [
        m
        for customer in range(1, 30)
        for account in world.accounts("apibank", customer)
        for m in world.movements(account, clock.now())
        if m.pending
    ]
    assert pending


def test_ten_thousand_customers_cost_no_more_than_ten() -> None:
    world = World(0)
    tracemalloc.start()
    for customer in range(1, 11):
        world.login("apibank", customer)
    small = tracemalloc.get_traced_memory()[0]
    for customer in range(1, 10_001):
        world.login("apibank", customer)
    large = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert large - small < 200_000

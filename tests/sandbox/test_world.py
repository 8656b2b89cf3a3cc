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
    account = next(
        a
        for n in range(42, 200)
        for a in world.accounts("formbank", n)
        if sum(m.pending for m in world.movements(a, clock.now())) >= 3
    )
    before = {m.ref: m for m in world.movements(account, clock.now())}
    pending = [m for m in before.values() if m.pending]
    clock.advance(timedelta(days=5))
    after = {m.ref: m for m in world.movements(account, clock.now())}
    assert set(after) - set(before), "new movements appear as the clock moves"
    assert set(before) - set(after) <= {m.ref for m in pending}, "only pending ones go away"
    posted = [m for m in pending if m.ref in after]
    assert posted, "most pending movements post"
    assert all(not after[m.ref].pending for m in posted), "pending movements post within 3 days"
    changed = [m for m in posted if after[m.ref].description != m.description]
    assert len(changed) == len(posted)
    assert all(after[m.ref].value_date > m.value_date for m in posted)
    booked = [m for m in after.values() if not m.pending]
    balance = account.opening_balance + sum(m.amount for m in booked)
    assert world.balance(account, clock.now()) == balance == booked[-1].balance_after


def test_about_one_pending_purchase_in_five_is_withdrawn_instead_of_posting() -> None:
    world, clock = World(0), SandboxClock()
    accounts = [a for customer in range(1, 300) for a in world.accounts("formbank", customer)]
    pending = {(a, m.ref) for a in accounts for m in world.movements(a, clock.now()) if m.pending}
    clock.advance(timedelta(days=4))  # past every posting time
    now = {(a, m.ref): m for a in accounts for m in world.movements(a, clock.now())}
    withdrawn = [key for key in pending if key not in now]
    assert all(not now[key].pending for key in pending if key in now)
    assert 0.1 < len(withdrawn) / len(pending) < 0.3, (len(withdrawn), len(pending))
    for account in {a for a, _ in withdrawn}:  # balances count what posted, never a withdrawal
        booked = [m for (a, _), m in now.items() if a == account and not m.pending]
        assert world.balance(account, clock.now()) == account.opening_balance + sum(
            m.amount for m in booked
        )


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

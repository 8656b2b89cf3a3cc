"""The banks' ground truth: customers, logins, contracts, accounts and movements, made on demand.

Nothing is stored: every fact is derived from (seed, bank, customer) and the sandbox clock, so
10,000 customers cost what 10 do, and the same seed always gives the same data.

Customers are numbered 1..``customers``. Per bank, customer ``n``:

* logs in as :meth:`World.login` says (username format per bank; password derived from the seed);
* is **locked out** when ``n % 97 == 13``;
* must pass a **one-time code** (2FA) at the legacy bank when ``n % 4 == 2``;
* has **many accounts** (8 contracts x 4 accounts) when ``n % 50 == 7``; else 1-3 contracts of 1-3.

At the neobank, a pending card purchase in five **posts with another amount** than it was
authorised for (a tip, a currency conversion): same reference, new amount. The other banks'
data is what it always was.

Movements start 120 days before the sandbox epoch. Each day brings 0-3 movements per account at
a time of day; about half the card purchases stay **pending** 1-3 days, then **post** with a
new description and the posting day as value date; one pending purchase in five is **withdrawn**
instead (a cancelled card authorisation): at what would have been its posting time it is gone.
Only movements that have appeared by the clock's time exist; balances count booked movements
only.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from random import Random

from schwifty import IBAN

from scrapeflow.sandbox._clock import DEFAULT_EPOCH

__all__ = [
    "BANKS",
    "HISTORY_DAYS",
    "MAX_CUSTOMERS",
    "Account",
    "AccountKind",
    "Contract",
    "Login",
    "Movement",
    "World",
]

BANKS = ("formbank", "apibank", "legacybank", "neobank")
MAX_CUSTOMERS = 999_999  # account codes and usernames have room for six digits
HISTORY_DAYS = 120
_BANK_CODES = {"formbank": "0182", "apibank": "1465", "legacybank": "2038", "neobank": "1563"}
_NIF_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
_CENT = Decimal("0.01")

_MERCHANTS = (
    "MERCADONA",
    "CARREFOUR EXPRESS",
    "EL CORTE INGLES",
    "DIA",
    "LIDL",
    "REPSOL",
    "CEPSA",
    "FARMACIA CENTRAL",
    "AMAZON EU",
    "ZARA",
    "DECATHLON",
    "IKEA",
    "RENFE VIAJEROS",
    "METRO DE MADRID",
    "CAFETERIA LA PLAZA",
    "RESTAURANTE CASA PACO",
    "FNAC",
    "PRIMARK",
)
_CITIES = ("MADRID", "BARCELONA", "VALENCIA", "SEVILLA", "BILBAO", "ZARAGOZA", "MALAGA")
_BILLS = (
    ("IBERDROLA CLIENTES", 35, 140),
    ("NATURGY", 20, 90),
    ("MOVISTAR", 25, 80),
    ("CANAL ISABEL II", 15, 45),
    ("SEGUROS MAPFRE", 30, 70),
    ("GIMNASIO FITNESS", 25, 50),
)
_EMPLOYERS = ("ACME IBERICA SL", "TALLERES DEL NORTE SA", "SOFTWARE LEVANTE SL", "HOSPITAL GENERAL")
_PEOPLE = ("GARCIA LOPEZ", "MARTINEZ RUIZ", "FERNANDEZ SANZ", "RODRIGUEZ GIL", "SANCHEZ MORENO")


class AccountKind(StrEnum):
    CHECKING = "checking"
    SAVINGS = "savings"
    CARD = "card"


@dataclass(frozen=True, slots=True)
class Login:
    """A customer's credentials and traits at one bank."""

    bank: str
    customer: int
    username: str
    password: str
    locked: bool
    otp_required: bool


@dataclass(frozen=True, slots=True)
class Contract:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Account:
    """An account as the bank knows it. Cards have no IBAN, only the bank's own number."""

    id: str
    bank: str
    customer: int
    contract: Contract
    iban: str | None
    number: str
    currency: str
    kind: AccountKind
    alias: str
    opening_balance: Decimal


@dataclass(frozen=True, slots=True)
class Movement:
    """One movement at a given sandbox time. ``ref`` is stable from pending to posted."""

    ref: str
    account_id: str
    operation_date: date
    value_date: date
    amount: Decimal
    description: str
    pending: bool
    balance_after: Decimal | None
    appeared_at: datetime
    posted_at: datetime


@dataclass(frozen=True, slots=True)
class _Draft:
    ref: str
    operation_date: date
    amount: Decimal
    pending_description: str
    description: str
    appeared_at: datetime
    posted_at: datetime
    """When it posts, or, when ``withdrawn``, when it disappears."""
    withdrawn: bool = False
    posted_amount: Decimal | None = None
    """The amount it posts with, when that differs from the authorised ``amount``."""


class World:
    """Every bank's data for one seed. ``epoch`` is where movement history is anchored."""

    def __init__(self, seed: int = 0, *, customers: int = 10_000, epoch: datetime = DEFAULT_EPOCH):
        self.seed = seed
        self.customers = customers
        self.epoch = epoch
        self.history_start = (epoch - timedelta(days=HISTORY_DAYS)).date()
        self._secret = hashlib.sha256(f"sandbox-world-{seed}".encode()).digest()

    # -- logins -----------------------------------------------------------------------------

    def login(self, bank: str, customer: int) -> Login:
        """Customer ``customer``'s login at ``bank``."""
        self._check(bank, customer)
        return Login(
            bank=bank,
            customer=customer,
            username=_username(bank, customer),
            password=self._password(bank, customer),
            locked=customer % 97 == 13,
            otp_required=bank == "legacybank" and customer % 4 == 2,
        )

    def customer_of(self, bank: str, username: str) -> int | None:
        """The customer behind ``username`` at ``bank``, or ``None``."""
        digits = {
            "formbank": username[:8] if len(username) == 9 else "",
            "apibank": username.removeprefix("user") if username.startswith("user") else "",
            "legacybank": username[1:] if username.startswith("L") else "",
            "neobank": username.removeprefix("neo") if username.startswith("neo") else "",
        }[bank]
        if not digits.isdigit():
            return None
        customer = int(digits)
        if not 1 <= customer <= self.customers or _username(bank, customer) != username:
            return None
        return customer

    def _password(self, bank: str, customer: int) -> str:
        mac = hmac.new(self._secret, f"password:{bank}:{customer}".encode(), hashlib.sha256)
        alphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
        return "".join(alphabet[b % len(alphabet)] for b in mac.digest()[:10])

    def _check(self, bank: str, customer: int) -> None:
        if bank not in BANKS:
            raise ValueError(f"unknown bank {bank!r}")
        if not 1 <= customer <= self.customers:
            raise ValueError(f"no customer {customer} (customers are 1..{self.customers})")

    # -- contracts and accounts -------------------------------------------------------------

    def contracts(self, bank: str, customer: int) -> list[Contract]:
        return [c for c, _ in self._layout(bank, customer)]

    def accounts(self, bank: str, customer: int) -> list[Account]:
        return [a for _, accounts in self._layout(bank, customer) for a in accounts]

    def account(self, bank: str, account_id: str) -> Account | None:
        """The account ``account_id`` at ``bank`` (ids are ``<customer>-<n>``), or ``None``."""
        customer_text, _, _ = account_id.partition("-")
        if not customer_text.isdigit() or not 1 <= int(customer_text) <= self.customers:
            return None
        for account in self.accounts(bank, int(customer_text)):
            if account.id == account_id:
                return account
        return None

    def _layout(self, bank: str, customer: int) -> tuple[tuple[Contract, list[Account]], ...]:
        self._check(bank, customer)
        return _layout(self.seed, bank, customer)

    # -- movements --------------------------------------------------------------------------

    def movements(self, account: Account, at: datetime) -> list[Movement]:
        """Every movement of ``account`` that exists at sandbox time ``at``, oldest first.

        Booked movements come in posting order with their running ``balance_after``; pending
        ones follow, without a balance.
        """
        return list(_movements(self.seed, account, self.history_start, at))

    def balance(self, account: Account, at: datetime) -> Decimal:
        """The booked balance of ``account`` at sandbox time ``at``."""
        balance = account.opening_balance
        for movement in _movements(self.seed, account, self.history_start, at):
            if not movement.pending:
                balance += movement.amount
        return balance


def _username(bank: str, customer: int) -> str:
    if bank == "formbank":
        return f"{customer:08d}{_NIF_LETTERS[customer % 23]}"
    if bank == "apibank":
        return f"user{customer:05d}"
    if bank == "neobank":
        return f"neo{customer:06d}"
    return f"L{customer:07d}"


def _money(rng: Random, low: float, high: float) -> Decimal:
    return Decimal(str(round(rng.uniform(low, high), 2))).quantize(_CENT)


@lru_cache(maxsize=2048)
def _layout(seed: int, bank: str, customer: int) -> tuple[tuple[Contract, list[Account]], ...]:
    rng = Random(f"layout:{seed}:{bank}:{customer}")
    many = customer % 50 == 7
    contract_count = 8 if many else rng.randint(1, 3)
    layout = []
    index = 0
    for c in range(contract_count):
        contract = Contract(id=f"{customer}-c{c + 1}", name=rng.choice(_CONTRACT_NAMES))
        accounts = []
        for _ in range(4 if many else rng.randint(1, 3)):
            index += 1
            accounts.append(_make_account(rng, bank, customer, contract, index))
        layout.append((contract, accounts))
    return tuple(layout)


_CONTRACT_NAMES = ("Contrato particulares", "Cuenta familiar", "Banca personal", "Negocio")


def _make_account(rng: Random, bank: str, customer: int, contract: Contract, index: int) -> Account:
    kind = rng.choices(list(AccountKind), weights=(6, 3, 2))[0]
    currency = (
        "EUR" if kind is AccountKind.CARD else rng.choices(["EUR", "USD", "GBP"], [8, 1, 1])[0]
    )
    account_id = f"{customer}-{index}"
    if kind is AccountKind.CARD:
        last4 = f"{rng.randrange(10_000):04d}"
        return Account(
            id=account_id,
            bank=bank,
            customer=customer,
            contract=contract,
            iban=None,
            number=f"4548 **** **** {last4}",
            currency=currency,
            kind=kind,
            alias=f"Tarjeta Visa ...{last4}",
            opening_balance=Decimal("0.00"),
        )
    branch = f"{rng.randrange(1, 10_000):04d}"
    account_code = f"{customer:06d}{index:02d}{rng.randrange(100):02d}"
    iban = str(
        IBAN.generate(
            "ES", bank_code=_BANK_CODES[bank], branch_code=branch, account_code=account_code
        )
    )
    low, high = (500, 20_000) if kind is AccountKind.CHECKING else (1_000, 60_000)
    alias = "Cuenta corriente" if kind is AccountKind.CHECKING else "Cuenta ahorro"
    return Account(
        id=account_id,
        bank=bank,
        customer=customer,
        contract=contract,
        iban=iban,
        number=iban[4:],
        currency=currency,
        kind=kind,
        alias=f"{alias} {currency}",
        opening_balance=_money(rng, low, high),
    )


def _movements(seed: int, account: Account, start: date, at: datetime) -> tuple[Movement, ...]:
    # The clock only moves forward and tests reuse a time many times: cache per (account, at).
    return _movements_cached(seed, account, start, at)


@lru_cache(maxsize=4096)
def _movements_cached(
    seed: int, account: Account, start: date, at: datetime
) -> tuple[Movement, ...]:
    drafts = [d for day in _days(start, at.date()) for d in _drafts(seed, account, day)]
    visible = [d for d in drafts if d.appeared_at <= at and not (d.withdrawn and d.posted_at <= at)]
    booked = sorted((d for d in visible if d.posted_at <= at), key=lambda d: (d.posted_at, d.ref))
    pending = sorted((d for d in visible if d.posted_at > at), key=lambda d: (d.appeared_at, d.ref))
    result: list[Movement] = []
    balance = account.opening_balance
    for d in booked:
        balance += d.amount if d.posted_amount is None else d.posted_amount
        result.append(_movement(account, d, pending=False, balance_after=balance))
    result.extend(_movement(account, d, pending=True, balance_after=None) for d in pending)
    return tuple(result)


def _movement(
    account: Account, d: _Draft, *, pending: bool, balance_after: Decimal | None
) -> Movement:
    return Movement(
        ref=d.ref,
        account_id=account.id,
        operation_date=d.operation_date,
        value_date=d.operation_date if pending else d.posted_at.date(),
        amount=d.amount if pending or d.posted_amount is None else d.posted_amount,
        description=d.pending_description if pending else d.description,
        pending=pending,
        balance_after=balance_after,
        appeared_at=d.appeared_at,
        posted_at=d.posted_at,
    )


def _days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


def _drafts(seed: int, account: Account, day: date) -> list[_Draft]:
    rng = Random(f"day:{seed}:{account.bank}:{account.id}:{day.toordinal()}")
    drafts: list[_Draft] = []
    if account.kind is AccountKind.SAVINGS:
        count = rng.choices((0, 1), weights=(9, 1))[0]
    else:
        count = rng.choices((0, 1, 2, 3), weights=(3, 4, 2, 1))[0]
    for j in range(count):
        minute = rng.randrange(7 * 60, 22 * 60)
        appeared = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=UTC)
        ref = (
            hashlib.sha1(
                f"{seed}:{account.bank}:{account.id}:{day}:{j}".encode(), usedforsecurity=False
            )
            .hexdigest()[:12]
            .upper()
        )
        amount, pending_text, text, delay = _event(rng, account, day)
        posted = (
            appeared
            if delay == 0
            else datetime.combine(day + timedelta(days=delay), time(6, 0), tzinfo=UTC)
        )
        # A fifth of the pending purchases are withdrawn; decided by the reference, so the
        # day's random sequence (and every other fact) stays what it was.
        withdrawn = delay > 0 and int(ref, 16) % 5 == 0
        posted_amount = _posted_amount(account, ref, amount) if delay and not withdrawn else None
        drafts.append(
            _Draft(ref, day, amount, pending_text, text, appeared, posted, withdrawn, posted_amount)
        )
    return drafts


def _posted_amount(account: Account, ref: str, amount: Decimal) -> Decimal | None:
    """At the neobank, one pending purchase in five posts for more than it was authorised:
    1% to 15% on top (a tip, a conversion at the day's rate). Decided by the reference alone."""
    if account.bank != "neobank" or int(ref, 16) % 5 != 1:
        return None
    extra = Decimal(int(ref[:4], 16) % 1400 + 100) / Decimal(10_000)
    return (amount * (1 + extra)).quantize(_CENT)


def _event(rng: Random, account: Account, day: date) -> tuple[Decimal, str, str, int]:
    """(amount, description while pending, description once booked, days pending)."""
    if account.kind is AccountKind.SAVINGS:
        if rng.random() < 0.5:
            return _money(rng, 0.5, 40), "", "LIQUIDACION INTERESES", 0
        return _money(rng, 50, 900), "", f"TRASPASO DESDE CUENTA {rng.randrange(1000, 9999)}", 0
    roll = rng.random()
    if account.kind is AccountKind.CHECKING and day.day == 28 and roll < 0.9:
        employer = rng.choice(_EMPLOYERS)
        return _money(rng, 1_600, 3_800), "", f"NOMINA {employer}", 0
    if account.kind is AccountKind.CHECKING and roll < 0.15:
        bill, low, high = rng.choice(_BILLS)
        return -_money(rng, low, high), "", f"RECIBO {bill}", 0
    if account.kind is AccountKind.CHECKING and roll < 0.25:
        person = rng.choice(_PEOPLE)
        if rng.random() < 0.5:
            return _money(rng, 10, 600), "", f"TRANSFERENCIA DE {person}", 0
        return -_money(rng, 10, 600), "", f"TRANSFERENCIA A {person}", 0
    merchant = rng.choice(_MERCHANTS)
    city = rng.choice(_CITIES)
    amount = -_money(rng, 1.5, 180)
    delay = rng.choice((0, 1, 1, 2, 3)) if rng.random() < 0.6 else 0
    pending_text = f"PAGO PENDIENTE {merchant[:12]}" if delay else ""
    return amount, pending_text, f"COMPRA TARJ. {merchant} {city}", delay

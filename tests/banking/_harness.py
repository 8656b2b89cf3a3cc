"""Running a bank scraper against the sandbox and comparing the database with its ground truth.

Scraper tests use :func:`scrape_once` (one scraper, one access, no launcher), launcher tests the
launcher itself; both compare with :func:`truth` through :func:`stored` and :func:`assert_exact`.
The sandbox's admin API is called through :class:`~scrapeflow.sandbox.SandboxAdmin`;
:func:`credentials`, :func:`truth`, :func:`sandbox_today` and :func:`admin` are one-call
shorthands for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import select

from scrapeflow.banking import (
    Access,
    AccessSink,
    Account,
    Credential,
    CredentialVault,
    Customer,
    FinancialEntity,
    IncrementalPolicy,
    Movement,
    ResultCode,
    ScrapeContext,
    SqlWriter,
    WriteQueue,
    get_scraper,
    result_for,
)
from scrapeflow.db import create_engine, session_factory
from scrapeflow.http import HttpClient, HttpConfig, RetryPolicy
from scrapeflow.sandbox import BankTruth, CustomerLogin, Sandbox, SandboxAdmin

VAULT = CredentialVault([CredentialVault.generate_key()])


async def admin(sandbox: Sandbox, bank: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """Call any admin route of ``bank``: GET, or POST ``body``. Prefer :class:`SandboxAdmin`'s
    typed methods; this stays for tests that list routes as data."""
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        return await client.request(bank, "GET" if body is None else "POST", path, json=body)


async def admin_delete(sandbox: Sandbox, bank: str, path: str) -> Any:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        return await client.request(bank, "DELETE", path)


async def credentials(sandbox: Sandbox, bank: str, n: int) -> CustomerLogin:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        return await client.customer(bank, n)


async def sandbox_today(sandbox: Sandbox, bank: str = "formbank") -> date:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        return (await client.now(site=bank)).date()


async def truth(sandbox: Sandbox, bank: str, username: str, since: date | None = None) -> BankTruth:
    async with SandboxAdmin.from_sandbox(sandbox) as client:
        return await client.truth(bank, username, since=since)


async def add_access(db_url: str, bank: str, n: int, username: str, password: str) -> int:
    """Customer ``cust-n`` (created if new) with an access at ``bank``; the access id."""
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session, session.begin():
            customer = await session.scalar(
                select(Customer).where(Customer.external_id == f"cust-{n}")
            )
            if customer is None:
                customer = Customer(external_id=f"cust-{n}", name=f"Customer {n}")
                session.add(customer)
            entity = await session.scalar(
                select(FinancialEntity).where(FinancialEntity.code == bank)
            )
            if entity is None:
                entity = FinancialEntity(code=bank, name=bank, country="ES")
                session.add(entity)
            await session.flush()
            access = Access(
                customer_id=customer.id,
                entity_id=entity.id,
                login=username,
                secret=VAULT.encrypt(password),
            )
            session.add(access)
            await session.flush()
            return access.id
    finally:
        await engine.dispose()


async def bank_access(
    sandbox: Sandbox, db_url: str, bank: str, n: int
) -> tuple[int, CustomerLogin]:
    """Customer n's access at ``bank`` (credentials from the sandbox); (access id, credentials)."""
    cred = await credentials(sandbox, bank, n)
    return await add_access(db_url, bank, n, cred["username"], cred["password"]), cred


@dataclass
class Scraped:
    code: ResultCode
    detail: str
    accounts: int
    movements: int
    state: dict[str, Any] = field(default_factory=dict)


def fast_http() -> HttpClient:
    """An HTTP client that gives up quickly (tests provoke dead banks on purpose)."""
    return HttpClient(
        HttpConfig(timeout=10, retry=RetryPolicy(attempts=3, backoff=0.05, backoff_max=0.2))
    )


async def scrape_once(
    sandbox: Sandbox,
    db_url: str,
    bank: str,
    access_id: int,
    *,
    login: str,
    password: str | None = None,
    otp: str | None = None,
    state: dict[str, Any] | None = None,
    policy: IncrementalPolicy | None = None,
    http: HttpClient | None = None,
) -> Scraped:
    """Run ``bank``'s registered scraper once for one access, as the launcher would."""
    engine = create_engine(db_url)
    writer = SqlWriter(session_factory(engine))
    today = await sandbox_today(sandbox, bank)
    owned = http is None
    client = http or fast_http()
    try:
        async with client if owned else _noop(), WriteQueue(writers=1) as queue:
            async with session_factory(engine)() as session:
                access = await session.get(Access, access_id)
                assert access is not None
                token = access.secret if password is None else VAULT.encrypt(password)
            context = ScrapeContext(
                access_id=access_id,
                login=login,
                credential=Credential(VAULT, token),
                base_url=sandbox.urls[bank],
                http=client,
                sink=AccessSink(writer, queue, access_id),
                today=today,
                policy=policy or IncrementalPolicy(),
                state=dict(state or {}),
                otp=otp,
            )
            scraper = get_scraper(bank)(context)
            try:
                await scraper.main()
            except Exception as exc:
                code, detail = result_for(exc)
            else:
                code, detail = ResultCode.SUCCESS, ""
            return Scraped(
                code, detail, context.sink.accounts, context.sink.movements, context.state
            )
    finally:
        await engine.dispose()


class _noop:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def stored(db_url: str, access_id: int) -> tuple[list[Account], dict[str, list[Movement]]]:
    """The accounts of an access and each one's movements, as stored."""
    engine = create_engine(db_url)
    try:
        async with session_factory(engine)() as session:
            accounts = list(
                (await session.scalars(select(Account).where(Account.access_id == access_id))).all()
            )
            movements: dict[str, list[Movement]] = {}
            for account in accounts:
                rows = await session.scalars(
                    select(Movement).where(Movement.account_id == account.id)
                )
                movements[account.bank_ref] = list(rows.all())
            return accounts, movements
    finally:
        await engine.dispose()


def assert_exact(
    accounts: list[Account],
    movements: dict[str, list[Movement]],
    expected: BankTruth,
    *,
    since: date,
) -> int:
    """Stored accounts equal the truth's exactly; stored movements operated on or after
    ``since`` equal the truth's (by reference: dates, amount, description, pending, balance).
    Returns the number of movements compared."""
    by_ref = {a.bank_ref: a for a in accounts}
    assert set(by_ref) == {a["id"] for a in expected["accounts"]}
    for want in expected["accounts"]:
        got = by_ref[want["id"]]
        assert got.balance == Decimal(want["balance"]), want["id"]
        assert got.currency == want["currency"]
        assert got.iban == want["iban"]
        if want["number"]:
            assert got.number is not None and got.number.replace(" ", "") == want["number"].replace(
                " ", ""
            )
        assert got.type.value == want["kind"]
    compared = 0
    for account_id, wanted in expected["movements"].items():
        got_rows = {
            m.movement_key: m for m in movements.get(account_id, []) if m.operation_date >= since
        }
        want_rows = {
            f"ref:{w['ref']}": w for w in wanted if date.fromisoformat(w["operation_date"]) >= since
        }
        assert set(got_rows) == set(want_rows), account_id
        for key, w in want_rows.items():
            m = got_rows[key]
            assert (
                m.operation_date.isoformat(),
                m.value_date.isoformat(),
                m.amount,
                m.description,
                m.pending,
                m.balance_after,
            ) == (
                w["operation_date"],
                w["value_date"],
                Decimal(w["amount"]),
                w["description"],
                w["pending"],
                None if w["balance_after"] is None else Decimal(w["balance_after"]),
            ), key
            compared += 1
    return compared

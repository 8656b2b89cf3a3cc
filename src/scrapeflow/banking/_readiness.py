"""The check a launch makes before it claims anything: every selected access can be scraped
with this configuration (a scraper, a URL, a vault that opens its password)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.banking._models import Access, Customer, FinancialEntity
from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._scraper import BasicScraper
from scrapeflow.banking._vault import KEY_FILE_ENV, KEYS_ENV, CredentialVault
from scrapeflow.errors import ConfigError, UnknownScraper, VaultError

__all__ = ["check_ready"]


async def check_ready(
    sessions: async_sessionmaker[AsyncSession],
    accesses: ColumnElement[bool],
    *,
    vault: CredentialVault,
    base_url: Callable[[str, type[BasicScraper]], str | None],
) -> None:
    """Check, before anything is claimed, that the launch's configuration can do for the
    enabled ``accesses`` selected: a scraper and a URL for each bank, a vault that opens each
    credential (its signature only: nothing is decrypted), a log directory to write in.
    Raises naming the access, its bank and the setting. ``base_url``: the URL the launch
    would use for a bank (None: none configured)."""
    query = (
        select(Access.id, Access.secret, FinancialEntity.code, Customer.external_id)
        .join(FinancialEntity, FinancialEntity.id == Access.entity_id)
        .join(Customer, Customer.id == Access.customer_id)
        .where(accesses, Access.enabled.is_(True))
        .order_by(Access.id)
    )
    async with sessions() as session:
        rows = (await session.execute(query)).all()
    for access_id, secret, bank, external_id in rows:
        whose = f"access {access_id} of customer {external_id!r}"
        try:
            scraper_cls = get_scraper(bank)
        except UnknownScraper as exc:
            raise UnknownScraper(f"{exc} ({whose})") from None
        if not base_url(bank, scraper_cls):
            raise ConfigError(
                f"no URL for bank {bank!r} ({whose}): give it with --bank-url "
                f"{bank}=https://…, SCRAPEFLOW_BANK_URLS or a sandbox manifest"
            )
        if not vault.can_decrypt(secret):
            raise VaultError(
                f"the vault cannot decrypt the stored password of {whose} at {bank!r}: "
                f"it was encrypted with a key that {KEYS_ENV} / {KEY_FILE_ENV} do not "
                "hold (a wrong or rotated-away key), or it is corrupt"
            )

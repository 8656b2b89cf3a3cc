"""The job kinds the service runs, by name: what ``POST …/refresh`` and ``POST /v1/jobs`` queue."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scrapeflow.config import Settings
from scrapeflow.jobs import JobContext, JobHandler
from scrapeflow.server._events import EventLog

__all__ = ["BANK_OTP", "BANK_REFRESH", "job_kinds"]

_WAIT_BEATS = 5  # the watchdog calls a row stale after 3 missed beats
BANK_REFRESH = "bank.refresh"
BANK_OTP = "bank.otp"
_EVENT_NAMES = {
    "launch_started": "bank.refresh_started",
    "accounts": "bank.accounts",
    "movements": "bank.movements",
    "access_finished": "bank.access_finished",
    "launch_finished": "bank.all_updated",
}


async def _free_dead_launch(
    sessions: async_sessionmaker[AsyncSession], customer: str, heartbeat: float
) -> None:
    """Reset what a dead launch left claimed for ``customer``, once its heartbeats are stale
    (at most a few heartbeat intervals from now). A live launch (a command-line refresh, say)
    keeps beating and is left alone: the refresh then fails with that reason."""
    from scrapeflow.banking import ScrapeState, find_customer, reset_stuck

    for _ in range(_WAIT_BEATS):
        async with sessions() as session:
            row = await find_customer(session, customer)
            if row.scrape_state is not ScrapeState.IN_PROGRESS:
                return
            customer_id = row.id
        found = await reset_stuck(
            sessions, limit=timedelta(milliseconds=1), heartbeat=heartbeat, customer=customer_id
        )
        if found.customers:
            return
        await asyncio.sleep(heartbeat)


def job_kinds(settings: Settings, events: EventLog) -> dict[str, JobHandler]:
    """The handlers of this service's job kinds, on ``settings``; what they do is told to
    ``events`` as it happens."""

    async def bank_refresh(context: JobContext) -> Mapping[str, Any]:
        """Refresh one customer (``params["customer"]``, its external id): every access at once.

        Run again after a crash, it refreshes again: upserts make that idempotent. A customer
        a command-line refresh holds fails the job with that reason.
        """
        from scrapeflow.banking import EventKind, LaunchEvent, launcher_from_settings

        customer = str(context.params["customer"])
        context.progress(accesses_done=0, accounts=0, movements=0)

        async def deliver(event: LaunchEvent) -> None:
            if event.kind is EventKind.ACCOUNTS:
                context.progress(accounts=context.counts.get("accounts", 0) + event.count)
            elif event.kind is EventKind.MOVEMENTS:
                context.progress(movements=context.counts.get("movements", 0) + event.count)
            elif event.kind is EventKind.ACCESS_FINISHED:
                context.progress(accesses_done=context.counts.get("accesses_done", 0) + 1)
            data = {k: v for k, v in event.as_dict().items() if k not in ("kind", "customer_id")}
            await events.append(
                _EVENT_NAMES[event.kind], data, customer=customer, job_id=context.job.id
            )

        async with launcher_from_settings(settings, on_event=deliver) as launcher:
            if context.job.attempts > 1:  # the last attempt's process died holding the customer
                await _free_dead_launch(launcher.sessions, customer, settings.heartbeat)
            report = await launcher.refresh(customer)
        return {
            "customer": report.external_id,
            "ok": report.ok,
            "seconds": round(report.seconds, 3),
            "balances_seconds": report.balances_seconds,
            "accesses": [
                {
                    "access_id": a.access_id,
                    "bank": a.bank,
                    "result": a.code.value,
                    "accounts": a.accounts,
                    "movements": a.movements,
                }
                for a in report.accesses
            ],
        }

    async def bank_otp(context: JobContext) -> Mapping[str, Any]:
        """Resume a two-factor access with the code the customer typed (sealed in the params
        with the vault: a code is a secret, the jobs table never holds it in clear)."""
        from scrapeflow.banking import CredentialVault, launcher_from_settings

        customer = str(context.params["customer"])
        access_id = int(context.params["access_id"])
        code = CredentialVault.from_settings(settings).decrypt(
            str(context.params["code_sealed"]).encode()
        )

        async def deliver(event: Any) -> None:
            data = {k: v for k, v in event.as_dict().items() if k not in ("kind", "customer_id")}
            await events.append(
                _EVENT_NAMES[event.kind.value], data, customer=customer, job_id=context.job.id
            )

        async with launcher_from_settings(settings, on_event=deliver) as launcher:
            report = await launcher.scrape_access(access_id, otp=code)
        return {
            "customer": customer,
            "access_id": report.access_id,
            "bank": report.bank,
            "result": report.code.value,
            "ok": report.code.ok,
            "accounts": report.accounts,
            "movements": report.movements,
        }

    return {BANK_REFRESH: bank_refresh, BANK_OTP: bank_otp}

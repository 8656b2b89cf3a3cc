"""The daily schedule with an injected clock, on SQLite and PostgreSQL: one run per day across
restarts and between processes, spread inside its window, made up only inside it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import pytest

from scrapeflow.config import Settings
from scrapeflow.db import create_engine
from scrapeflow.errors import ConfigError
from scrapeflow.jobs import (
    DailySchedule,
    EmbeddedJobQueue,
    JobContext,
    JobState,
    Scheduler,
    SqlJobStore,
)

CUSTOMERS = [f"cust-{n}" for n in range(1, 13)]
WINDOW = timedelta(hours=2)
DAILY = DailySchedule("0 4 * * *", "Europe/Madrid", WINDOW)
# 2026-07-01 04:00 in Madrid (summer time, UTC+2) is 02:00 UTC.
FIRE = datetime(2026, 7, 1, 2, 0, tzinfo=UTC)
LATER = FIRE + timedelta(hours=3)  # when the runs are read (no slot expired yet)


async def never_run(context: JobContext) -> None:
    raise AssertionError("a queue that only submits ran a job")


class Service:
    """One service process's part: its job queue (submits only) and its scheduler."""

    def __init__(
        self, url: str, schedule: DailySchedule = DAILY, *, jobs_end: bool = False
    ) -> None:
        self.jobs_end = jobs_end
        """Each job ends as soon as it is submitted (its dedupe key is free again)."""
        self.failing: set[str] = set()
        self.engine = create_engine(url)
        # Submits only: the refreshes wait in the queue, where the test counts them.
        self.queue = EmbeddedJobQueue(
            SqlJobStore(url, engine=self.engine), {"bank.refresh": never_run}, run_jobs=False
        )
        self.submitted: list[str] = []
        self.scheduler = Scheduler(
            self.engine, schedule, targets=self.customers, submit=self.refresh
        )

    async def customers(self) -> Sequence[str]:
        return CUSTOMERS

    async def refresh(self, customer: str) -> str:
        if customer in self.failing:
            raise ConnectionError("the job queue did not answer")
        self.submitted.append(customer)
        job = await self.queue.submit(
            "bank.refresh", {"customer": customer}, dedupe_key=f"refresh:{customer}"
        )
        if self.jobs_end:
            await self.queue.cancel(job.id)
        return job.id

    async def __aenter__(self) -> Service:
        await self.queue.__aenter__()
        await self.scheduler.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.queue.__aexit__(None, None, None)
        await self.engine.dispose()


async def refresh_jobs(service: Service) -> list[str]:
    jobs = await service.queue.find(kind="bank.refresh", limit=1000)
    return sorted(job.params["customer"] for job in jobs)


async def test_one_run_a_day_across_a_restart(sql_url: str) -> None:
    async with Service(sql_url) as first:
        await first.scheduler.tick(FIRE - timedelta(minutes=1))
        assert await first.scheduler.runs(LATER) == []  # not yet
        await first.scheduler.tick(FIRE + timedelta(seconds=1))
        (run,) = await first.scheduler.runs(LATER)
        assert run.run_date == date(2026, 7, 1)  # Madrid's date
        assert run.planned == len(CUSTOMERS)
        assert 1 <= run.submitted < len(CUSTOMERS)  # the first slot is due at the fire
    # The process stops mid-window; another starts and goes through the rest of the day.
    async with Service(sql_url) as second:
        moment = FIRE + timedelta(minutes=5)
        while moment < FIRE + timedelta(hours=23):
            await second.scheduler.tick(moment)
            moment += timedelta(minutes=7)
        (run,) = await second.scheduler.runs(LATER)
        assert run.submitted == run.planned == len(CUSTOMERS)
        assert await refresh_jobs(second) == sorted(CUSTOMERS)  # each customer once
        # The next day fires the next run.
        await second.scheduler.tick(FIRE + timedelta(days=1, minutes=1))
        runs = await second.scheduler.runs(LATER)
        assert [r.run_date for r in runs] == [date(2026, 7, 2), date(2026, 7, 1)]


async def test_submissions_spread_inside_the_window(sql_url: str) -> None:
    async with Service(sql_url) as service:
        await service.scheduler.tick(FIRE)
        half = FIRE + WINDOW / 2
        await service.scheduler.tick(half)
        (run,) = await service.scheduler.runs(LATER)
        # Evenly spread, one every window / 12 from the fire: those due by half the window
        # are the first half and the one due exactly then.
        assert run.submitted == len(CUSTOMERS) // 2 + 1
        assert run.last_due_at is not None
        assert FIRE < run.last_due_at < FIRE + WINDOW
        wake = await service.scheduler.tick(half)
        assert half < wake <= half + WINDOW / len(CUSTOMERS)  # wakes for the next slot
        await service.scheduler.tick(FIRE + WINDOW)
        (run,) = await service.scheduler.runs(LATER)
        assert run.submitted == len(CUSTOMERS)
        assert len(set(service.submitted)) == len(CUSTOMERS)


async def test_a_missed_fire_is_made_up_inside_its_window_only(sql_url: str) -> None:
    async with Service(sql_url) as service:
        late = FIRE + timedelta(minutes=90)
        await service.scheduler.tick(late)
        (run,) = await service.scheduler.runs(LATER)
        assert run.fire_at == FIRE
        assert run.planned_at == late
        # What is left of the window (30 minutes) holds every slot.
        assert run.last_due_at is not None
        assert late <= run.last_due_at < FIRE + WINDOW
        # A day whose window passed while nothing ran is not made up the next morning.
        await service.scheduler.tick(FIRE + timedelta(days=1) + WINDOW + timedelta(minutes=1))
        assert [r.run_date for r in await service.scheduler.runs(LATER)] == [date(2026, 7, 1)]


async def test_two_processes_plan_one_run(sql_url: str) -> None:
    async with Service(sql_url) as one, Service(sql_url) as other:
        moments = [FIRE + timedelta(minutes=m) for m in range(0, 121, 10)]
        for moment in moments:
            await asyncio.gather(one.scheduler.tick(moment), other.scheduler.tick(moment))
        (run,) = await one.scheduler.runs(LATER)
        assert run.submitted == run.planned == len(CUSTOMERS)
        assert await refresh_jobs(one) == sorted(CUSTOMERS)
        # Between them, each customer's refresh was asked for at least once, and is one job.
        assert set(one.submitted) | set(other.submitted) == set(CUSTOMERS)


async def test_a_customer_already_refreshing_joins_its_job(sql_url: str) -> None:
    async with Service(sql_url) as service:
        mine = await service.queue.submit(
            "bank.refresh", {"customer": "cust-1"}, dedupe_key="refresh:cust-1"
        )
        await service.scheduler.tick(FIRE)
        await service.scheduler.tick(FIRE + WINDOW)
        (run,) = await service.scheduler.runs(LATER)
        job_ids = await service.scheduler.job_ids(run.run_date)
        assert mine.id in job_ids
        assert len(await refresh_jobs(service)) == len(CUSTOMERS)
        tally = await service.queue.tally(job_ids)
        assert tally.counts == {JobState.QUEUED: len(CUSTOMERS)}
        await service.queue.cancel(mine.id)
        tally = await service.queue.tally(job_ids)
        assert tally.counts[JobState.CANCELLED] == 1
        assert tally.last_finished_at is not None


def test_daylight_saving_moves_the_fire_in_utc() -> None:
    summer = DAILY.next_fire(datetime(2026, 7, 1, 12, tzinfo=UTC))
    winter = DAILY.next_fire(datetime(2026, 12, 1, 12, tzinfo=UTC))
    assert (summer.hour, winter.hour) == (2, 3)  # 04:00 in Madrid either way
    assert DAILY.run_date(summer) == date(2026, 7, 2)
    # A fire just after local midnight belongs to the local day, not the UTC one.
    late = DailySchedule("30 0 * * *", "Europe/Madrid", WINDOW)
    fire = late.next_fire(datetime(2026, 7, 1, 12, tzinfo=UTC))
    assert fire == datetime(2026, 7, 1, 22, 30, tzinfo=UTC)
    assert late.run_date(fire) == date(2026, 7, 2)


async def test_several_fires_a_day_run_once(sql_url: str) -> None:
    hourly = DailySchedule("0 * * * *", "UTC", timedelta(0))
    async with Service(sql_url, hourly) as service:
        for hours in range(5):
            await service.scheduler.tick(FIRE + timedelta(hours=hours, minutes=1))
        (run,) = await service.scheduler.runs(LATER)
        assert run.fire_at == FIRE
        assert run.submitted == len(CUSTOMERS)  # a zero window: all at once
        assert len(service.submitted) == len(CUSTOMERS)


async def test_two_processes_submit_each_slot_once_even_when_jobs_end_at_once(
    sql_url: str,
) -> None:
    at_once = DailySchedule("0 4 * * *", "Europe/Madrid", timedelta(0))
    async with (
        Service(sql_url, at_once, jobs_end=True) as one,
        Service(sql_url, at_once, jobs_end=True) as other,
    ):
        await asyncio.gather(one.scheduler.tick(FIRE), other.scheduler.tick(FIRE))
        await asyncio.gather(
            one.scheduler.tick(FIRE + timedelta(minutes=1)),
            other.scheduler.tick(FIRE + timedelta(minutes=1)),
        )
        # No dedupe key can join a job that already ended: only the claim keeps it to one.
        assert sorted(one.submitted + other.submitted) == sorted(CUSTOMERS)
        assert await refresh_jobs(one) == sorted(CUSTOMERS)


async def test_a_target_that_cannot_be_submitted_holds_back_no_other(sql_url: str) -> None:
    async with Service(sql_url) as service:
        service.failing = {"cust-3"}
        for minutes in range(0, 121, 10):
            await service.scheduler.tick(FIRE + timedelta(minutes=minutes))
        (run,) = await service.scheduler.runs(LATER)
        assert run.submitted == len(CUSTOMERS) - 1
        assert "cust-3" not in await refresh_jobs(service)
        assert not run.complete
        # Tried again once its claim lapses, while the day lasts.
        service.failing = set()
        await service.scheduler.tick(FIRE + timedelta(hours=3))
        (run,) = await service.scheduler.runs(LATER)
        assert run.submitted == len(CUSTOMERS)
        assert run.complete


async def test_a_slot_never_submitted_expires_after_a_day(sql_url: str) -> None:
    async with Service(sql_url) as service:
        service.failing = {"cust-3"}
        await service.scheduler.tick(FIRE)
        await service.scheduler.tick(FIRE + WINDOW)
        (run,) = await service.scheduler.runs(FIRE + timedelta(hours=27))
        assert (run.submitted, run.expired) == (len(CUSTOMERS) - 1, 1)
        assert run.complete  # it will not get its job any more


async def test_the_next_run_skips_the_rest_of_a_day_already_run(sql_url: str) -> None:
    hourly = DailySchedule("0 * * * *", "UTC", timedelta(0))
    async with Service(sql_url, hourly) as service:
        assert await service.scheduler.next_run(FIRE - timedelta(minutes=30)) == FIRE
        await service.scheduler.tick(FIRE + timedelta(minutes=1))
        tomorrow = datetime(2026, 7, 2, 0, 0, tzinfo=UTC)
        assert await service.scheduler.next_run(FIRE + timedelta(minutes=1)) == tomorrow


async def test_runs_older_than_a_month_are_deleted_when_a_run_is_planned(sql_url: str) -> None:
    async with Service(sql_url) as service:
        await service.scheduler.tick(FIRE)
        await service.scheduler.tick(FIRE + timedelta(days=29))
        later = FIRE + timedelta(days=40)
        await service.scheduler.tick(later)
        dates = [r.run_date for r in await service.scheduler.runs(later, limit=30)]
        assert dates == [date(2026, 8, 10), date(2026, 7, 30)]
        assert await service.scheduler.job_ids(date(2026, 7, 1)) == []


def test_a_cron_expression_that_never_fires_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLOW_SCHEDULE", "0 4 31 2 *")  # February 31st
    with pytest.raises(ConfigError, match="SCRAPEFLOW_SCHEDULE: the cron expression never fires"):
        Settings.load()

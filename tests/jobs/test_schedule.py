"""The daily schedule with an injected clock, on SQLite and PostgreSQL: one run per day across
restarts and between processes, spread inside its window, made up only inside it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

from scrapeflow.db import create_engine
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


async def never_run(context: JobContext) -> None:
    raise AssertionError("a queue that only submits ran a job")


class Service:
    """One service process's part: its job queue (submits only) and its scheduler."""

    def __init__(self, url: str, schedule: DailySchedule = DAILY) -> None:
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
        self.submitted.append(customer)
        job = await self.queue.submit(
            "bank.refresh", {"customer": customer}, dedupe_key=f"refresh:{customer}"
        )
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
        assert await first.scheduler.runs() == []  # not yet
        await first.scheduler.tick(FIRE + timedelta(seconds=1))
        (run,) = await first.scheduler.runs()
        assert run.run_date == date(2026, 7, 1)  # Madrid's date
        assert run.planned == len(CUSTOMERS)
        assert 1 <= run.submitted < len(CUSTOMERS)  # the first slot is due at the fire
    # The process stops mid-window; another starts and goes through the rest of the day.
    async with Service(sql_url) as second:
        moment = FIRE + timedelta(minutes=5)
        while moment < FIRE + timedelta(hours=23):
            await second.scheduler.tick(moment)
            moment += timedelta(minutes=7)
        (run,) = await second.scheduler.runs()
        assert run.submitted == run.planned == len(CUSTOMERS)
        assert await refresh_jobs(second) == sorted(CUSTOMERS)  # each customer once
        # The next day fires the next run.
        await second.scheduler.tick(FIRE + timedelta(days=1, minutes=1))
        runs = await second.scheduler.runs()
        assert [r.run_date for r in runs] == [date(2026, 7, 2), date(2026, 7, 1)]


async def test_submissions_spread_inside_the_window(sql_url: str) -> None:
    async with Service(sql_url) as service:
        await service.scheduler.tick(FIRE)
        half = FIRE + WINDOW / 2
        await service.scheduler.tick(half)
        (run,) = await service.scheduler.runs()
        # Evenly spread, one every window / 12 from the fire: those due by half the window
        # are the first half and the one due exactly then.
        assert run.submitted == len(CUSTOMERS) // 2 + 1
        assert run.last_due_at is not None
        assert FIRE < run.last_due_at < FIRE + WINDOW
        wake = await service.scheduler.tick(half)
        assert half < wake <= half + WINDOW / len(CUSTOMERS)  # wakes for the next slot
        await service.scheduler.tick(FIRE + WINDOW)
        (run,) = await service.scheduler.runs()
        assert run.submitted == len(CUSTOMERS)
        assert len(set(service.submitted)) == len(CUSTOMERS)


async def test_a_missed_fire_is_made_up_inside_its_window_only(sql_url: str) -> None:
    async with Service(sql_url) as service:
        late = FIRE + timedelta(minutes=90)
        await service.scheduler.tick(late)
        (run,) = await service.scheduler.runs()
        assert run.fire_at == FIRE
        assert run.planned_at == late
        # What is left of the window (30 minutes) holds every slot.
        assert run.last_due_at is not None
        assert late <= run.last_due_at < FIRE + WINDOW
        # A day whose window passed while nothing ran is not made up the next morning.
        await service.scheduler.tick(FIRE + timedelta(days=1) + WINDOW + timedelta(minutes=1))
        assert [r.run_date for r in await service.scheduler.runs()] == [date(2026, 7, 1)]


async def test_two_processes_plan_one_run(sql_url: str) -> None:
    async with Service(sql_url) as one, Service(sql_url) as other:
        moments = [FIRE + timedelta(minutes=m) for m in range(0, 121, 10)]
        for moment in moments:
            await asyncio.gather(one.scheduler.tick(moment), other.scheduler.tick(moment))
        (run,) = await one.scheduler.runs()
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
        (run,) = await service.scheduler.runs()
        assert mine.id in run.job_ids
        assert len(await refresh_jobs(service)) == len(CUSTOMERS)
        tally = await service.queue.tally(run.job_ids)
        assert tally.counts == {JobState.QUEUED: len(CUSTOMERS)}
        await service.queue.cancel(mine.id)
        tally = await service.queue.tally(run.job_ids)
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
        (run,) = await service.scheduler.runs()
        assert run.fire_at == FIRE
        assert run.submitted == len(CUSTOMERS)  # a zero window: all at once
        assert len(service.submitted) == len(CUSTOMERS)

"""``GET /v1/schedule``: the daily refresh of every customer — when it fires, and its last runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from scrapeflow.jobs import Scheduler, ScheduleRun
from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._schemas import ScheduleOut, ScheduleRunOut
from scrapeflow.server._state import ServiceState

__all__ = ["router", "schedule"]

router = APIRouter(prefix="/v1", tags=["schedule"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]


@router.get("/schedule", response_model=ScheduleOut)
async def schedule(
    state: State,
    key: Reader,
    runs: Annotated[int, Query(ge=1, le=30, description="how many of the last runs")] = 7,
) -> ScheduleOut:
    """The daily schedule (settings ``schedule``, ``schedule_timezone``, ``schedule_window``),
    its next run and its last runs with their refresh jobs by state. A run covers every
    customer: a key limited to some customers gets 403."""
    if key.customers:
        raise Problem(
            403, "forbidden", "the schedule covers every customer; this key is limited to some"
        )
    settings, scheduler = state.settings, state.scheduler
    if scheduler is None:
        return ScheduleOut(
            enabled=False,
            cron=None,
            timezone=settings.schedule_timezone,
            window_minutes=settings.schedule_window,
            next_run=None,
            checked_at=None,
            last_run=None,
            runs=[],
        )
    now = datetime.now(UTC)
    shown = [await _run_out(state, scheduler, run) for run in await scheduler.runs(now, runs)]
    return ScheduleOut(
        enabled=True,
        cron=scheduler.schedule.cron,
        timezone=scheduler.schedule.timezone,
        window_minutes=settings.schedule_window,
        next_run=await scheduler.next_run(now),
        checked_at=scheduler.checked_at,
        last_run=shown[0] if shown else None,
        runs=shown,
    )


async def _run_out(state: ServiceState, scheduler: Scheduler, run: ScheduleRun) -> ScheduleRunOut:
    tally = await state.queue.tally(await scheduler.job_ids(run.run_date))
    ended = run.complete and tally.active == 0
    return ScheduleRunOut(
        date=run.run_date,
        fire_at=run.fire_at,
        planned_at=run.planned_at,
        planned=run.planned,
        submitted=run.submitted,
        expired=run.expired,
        due_until=run.last_due_at,
        jobs={state.value: count for state, count in sorted(tally.counts.items())},
        finished_at=(tally.last_finished_at or run.planned_at) if ended else None,
    )

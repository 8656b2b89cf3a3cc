"""``GET /v1/schedule``: the daily refresh of every customer — when it fires, and its last runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends

from scrapeflow.jobs import ScheduleRun
from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._schemas import ScheduleOut, ScheduleRunOut
from scrapeflow.server._state import ServiceState

__all__ = ["router", "schedule"]

router = APIRouter(prefix="/v1", tags=["schedule"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
_RUNS_SHOWN = 7


@router.get("/schedule", response_model=ScheduleOut)
async def schedule(state: State, key: Reader) -> ScheduleOut:
    """The daily schedule (settings ``schedule``, ``schedule_timezone``, ``schedule_window``),
    its next fire and its last runs with their refresh jobs by state."""
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
    runs = [await _run_out(state, run) for run in await scheduler.runs(_RUNS_SHOWN)]
    return ScheduleOut(
        enabled=True,
        cron=scheduler.schedule.cron,
        timezone=scheduler.schedule.timezone,
        window_minutes=settings.schedule_window,
        next_run=scheduler.schedule.next_fire(datetime.now(UTC)),
        checked_at=scheduler.checked_at,
        last_run=runs[0] if runs else None,
        runs=runs,
    )


async def _run_out(state: ServiceState, run: ScheduleRun) -> ScheduleRunOut:
    tally = await state.queue.tally(run.job_ids)
    ended = run.complete and tally.active == 0
    return ScheduleRunOut(
        date=run.run_date,
        fire_at=run.fire_at,
        planned_at=run.planned_at,
        planned=run.planned,
        submitted=run.submitted,
        due_until=run.last_due_at,
        jobs={state.value: count for state, count in sorted(tally.counts.items())},
        finished_at=(tally.last_finished_at or run.planned_at) if ended else None,
    )

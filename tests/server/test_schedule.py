"""The service's daily run, for real: started inside its window it refreshes every customer
once, shows the run at ``/v1/schedule``, and a restart the same day runs nothing again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import httpx

from .conftest import Service, start_service, stop_service


def noon_zone() -> str:
    """A time zone where it is about noon now, so the test's day cannot end under it."""
    hours = (12 - datetime.now(UTC).hour) % 24
    hours = hours - 24 if hours > 14 else hours  # Etc/GMT-14 … Etc/GMT+9
    return "UTC" if hours == 0 else f"Etc/GMT{'-' if hours > 0 else '+'}{abs(hours)}"


def schedule_of(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/v1/schedule")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for(client: httpx.Client, done: Any, what: str, bound: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        body = schedule_of(client)
        if done(body):
            return body
        time.sleep(0.2)
    raise AssertionError(f"{what} within {bound} s; last: {body}")


def scheduled_refreshes(client: httpx.Client) -> list[str]:
    listed = client.get("/v1/jobs", params={"kind": "bank.refresh", "limit": 100}).json()["jobs"]
    jobs = [client.get(f"/v1/jobs/{j['id']}").json() for j in listed]  # a listing has no params
    return sorted(j["params"]["customer"] for j in jobs if j["params"].get("trigger"))


def test_the_daily_run_refreshes_every_customer_once_across_a_restart(service: Service) -> None:
    with service.client("read") as client:
        assert schedule_of(client)["enabled"] is False  # the fixture's service: schedule off

    stop_service(service.process)
    env = {
        **service.env,
        "SCRAPEFLOW_SCHEDULE": "* * * * *",  # fired less than a minute ago: inside the make-up
        "SCRAPEFLOW_SCHEDULE_TIMEZONE": noon_zone(),
        "SCRAPEFLOW_SCHEDULE_WINDOW": "0.05",  # three customers over three seconds
    }
    service.process, service.url = start_service(env)
    with service.client("read") as client:
        body = wait_for(
            client,
            lambda b: b["last_run"] and b["last_run"]["finished_at"],
            "the run to end",
        )
        run = body["last_run"]
        assert body["enabled"] is True
        assert body["cron"] == "* * * * *"
        assert run["planned"] == run["submitted"] == 3
        assert run["jobs"] == {"succeeded": 3}
        # As times, not strings: "13:14:00Z" sorts after "13:14:00.164437Z" as text.
        fire_at, planned_at, due_until = (
            datetime.fromisoformat(run[k]) for k in ("fire_at", "planned_at", "due_until")
        )
        assert fire_at <= planned_at <= due_until
        assert datetime.fromisoformat(body["next_run"]) > datetime.fromisoformat(run["fire_at"])
        assert scheduled_refreshes(client) == ["cust-1", "cust-2", "cust-3"]
        status = client.get("/v1/customers/cust-1/status").json()
        assert status["all_updated"] is True

    stop_service(service.process)
    restarted = datetime.now(UTC)
    service.process, service.url = start_service(env)
    with service.client("read") as client:
        body = wait_for(
            client,
            lambda b: b["checked_at"] and datetime.fromisoformat(b["checked_at"]) > restarted,
            "a pass of the restarted scheduler",
        )
        assert [r["date"] for r in body["runs"]] == [run["date"]]  # still the one run
        assert scheduled_refreshes(client) == ["cust-1", "cust-2", "cust-3"]

"""The service's numbers: ``/metrics`` (Prometheus text) and ``/v1/stats`` (the same as JSON).

Each app has its own :class:`ServiceMetrics` and its own ``CollectorRegistry`` (never the global
one: several apps may live in one process). What the API answered is counted as it happens (by
the access log middleware); the rest is read when asked, by :meth:`ServiceMetrics.read`: the
job queue's counts, the customers and the outbox (from the database), the HTTP traffic and the
write queues of this process (through their layers' read-only hooks), the machine (psutil).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil
from fastapi import Request
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from scrapeflow.http import HostTraffic, process_traffic
from scrapeflow.jobs import JobState
from scrapeflow.server._state import ServiceState

__all__ = ["Machine", "Readings", "ServiceMetrics", "method_label", "service_metrics"]

UNMATCHED = "unmatched"
"""The route label of a request that reached no route (an unknown path, or refused before)."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_MAX_HOSTS = 100
"""Hosts named in the metrics, the busiest first; the others are summed as ``other``."""


@dataclass(frozen=True, slots=True)
class Machine:
    """The machine and this process, now."""

    cpu_percent: float
    """Of all CPUs, since the previous reading."""
    memory_used: int
    memory_total: int
    memory_percent: float
    load: tuple[float, float, float]
    """Load average over 1, 5 and 15 minutes."""
    rss_bytes: int
    open_fds: int | None
    """None where the system does not count them."""
    started_at: float
    """When this process started (Unix time)."""

    @classmethod
    def now(cls, process: psutil.Process) -> Machine:
        memory = psutil.virtual_memory()
        load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
        return cls(
            cpu_percent=psutil.cpu_percent(interval=None),
            memory_used=memory.used,
            memory_total=memory.total,
            memory_percent=memory.percent,
            load=(load[0], load[1], load[2]),
            rss_bytes=process.memory_info().rss,
            open_fds=process.num_fds() if hasattr(process, "num_fds") else None,
            started_at=process.create_time(),
        )


@dataclass(frozen=True, slots=True)
class Readings:
    """Everything the service tells about itself, read at one moment."""

    jobs: dict[str, dict[str, int]]
    """Jobs by kind, then by state (every state, zeros included)."""
    customers: int
    webhook_backlog: int
    """Webhook deliveries pending in the outbox."""
    write_queue_depth: int
    sse_clients: int
    api_requests: int
    api_errors: int
    """Answers of status 500 or more."""
    traffic: dict[str, HostTraffic]
    """Outgoing HTTP of this process's scrapers, per host."""
    machine: Machine
    uptime_seconds: float

    def jobs_by_state(self) -> dict[str, int]:
        return {s.value: sum(by.get(s.value, 0) for by in self.jobs.values()) for s in JobState}


class ServiceMetrics:
    """The metrics of one app: its registry, the API's counters, and the readings."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._api_requests = Counter(
            "scrapeflow_api_requests",
            "API requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._api_latency = Histogram(
            "scrapeflow_api_request_duration_seconds",
            "Time to answer an API request, by route template (event streams left out).",
            ["route"],
            registry=self.registry,
        )
        self._stream_errors = Counter(
            "scrapeflow_sse_errors",
            "Event streams that failed after their answer started (also counted as API errors).",
            registry=self.registry,
        )
        self.requests = 0
        self.errors = 0
        self.sse_clients = 0
        self._process = psutil.Process()
        psutil.cpu_percent(interval=None)  # the first reading only starts the measure
        self.latest: Readings | None = None
        """What the last scrape read (the registry's own collector reports it)."""
        self.registry.register(_Readout(self))

    def observe(
        self, method: str, route: str, status: int, seconds: float, *, streamed: bool
    ) -> None:
        """Count one answered request (``streamed``: an event stream, whose time is not a
        latency)."""
        self.requests += 1
        if status >= 500:
            self.errors += 1
        self._api_requests.labels(method_label(method), route, str(status)).inc()
        if not streamed:
            self._api_latency.labels(route).observe(seconds)

    def stream_failed(self) -> None:
        """Count an event stream that failed after its answer had started: its status (200)
        was sent already, but it is an error of the service like a 5xx (``/v1/stats``)."""
        self.errors += 1
        self._stream_errors.inc()

    @contextmanager
    def streaming(self) -> Iterator[None]:
        """Count an event stream's client while inside."""
        self.sse_clients += 1
        try:
            yield
        finally:
            self.sse_clients -= 1

    async def read(self, state: ServiceState) -> Readings:
        """Everything, now (the job queue's counts, customers and outbox are read from the
        database)."""
        from scrapeflow.banking import Customer, queued_writes

        counted = await state.queue.counts()
        async with state.engine.connect() as connection:
            customers = (
                await connection.execute(select(func.count()).select_from(Customer))
            ).scalar_one()
        backlog = await state.webhooks.backlog()
        jobs: dict[str, dict[str, int]] = {}
        for (kind, job_state), count in counted.items():
            jobs.setdefault(kind, {s.value: 0 for s in JobState})[job_state.value] = count
        machine = Machine.now(self._process)
        return Readings(
            jobs=dict(sorted(jobs.items())),
            customers=customers,
            webhook_backlog=backlog,
            write_queue_depth=queued_writes(),
            sse_clients=self.sse_clients,
            api_requests=self.requests,
            api_errors=self.errors,
            traffic=process_traffic(),
            machine=machine,
            uptime_seconds=max(time.time() - machine.started_at, 0.0),
        )

    async def exposition(self, state: ServiceState, accept: str) -> tuple[bytes, str]:
        """Every metric, read now, in the format ``accept`` asks for (Prometheus text, or
        OpenMetrics); the body and its content type."""
        encode, content_type = choose_encoder(accept)
        readings = await self.read(state)
        # Set and used with no await between: a concurrent scrape cannot swap it mid-way.
        self.latest = readings
        return encode(self.registry), content_type


def method_label(method: str) -> str:
    """``method`` as the metrics and the access log name it: one of the methods the API
    knows, else ``other`` (any token is a method to HTTP: a client must not be able to make
    a new series, or a new log value, with each request)."""
    return method if method in _METHODS else "other"


async def service_metrics(request: Request) -> ServiceMetrics:
    """A dependency: the app's metrics (async: no hand-off to FastAPI's thread pool)."""
    metrics: ServiceMetrics = request.app.state.metrics
    return metrics


class _Readout(Collector):
    """The read-at-scrape-time metrics, from the latest :class:`Readings`."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        readings = self.metrics.latest
        if readings is None:
            return
        jobs = GaugeMetricFamily(
            "scrapeflow_jobs", "Jobs in the job store, by kind and state.", labels=["kind", "state"]
        )
        for kind, states in readings.jobs.items():
            for job_state, count in states.items():
                jobs.add_metric([kind, job_state], count)
        yield jobs
        yield _gauge("scrapeflow_customers", "Customers.", readings.customers)
        yield _gauge(
            "scrapeflow_webhook_backlog",
            "Webhook deliveries pending in the outbox.",
            readings.webhook_backlog,
        )
        yield _gauge(
            "scrapeflow_write_queue_depth",
            "Write batches waiting for a writer, over this process's bank write queues.",
            readings.write_queue_depth,
        )
        yield _gauge(
            "scrapeflow_sse_clients", "Event-stream clients connected.", readings.sse_clients
        )
        yield from _http(readings.traffic)
        yield from _machine(readings.machine, readings.uptime_seconds)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _busiest(traffic: dict[str, HostTraffic]) -> dict[str, HostTraffic]:
    ordered = sorted(traffic.items(), key=lambda item: (-item[1].requests, item[0]))
    named = dict(ordered[:_MAX_HOSTS])
    for _, rest in ordered[_MAX_HOSTS:]:
        named["other"] = named.get("other", HostTraffic()) + rest
    return named


def _http(traffic: dict[str, HostTraffic]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "scrapeflow_http_requests",
        "Outgoing HTTP attempts of this process's scrapers, by host (each retry counts).",
        labels=["host"],
    )
    retries = CounterMetricFamily(
        "scrapeflow_http_retries", "Outgoing HTTP retries, by host.", labels=["host"]
    )
    bans = CounterMetricFamily(
        "scrapeflow_http_bans", "Answers taken for a ban or a CAPTCHA, by host.", labels=["host"]
    )
    latency = SummaryMetricFamily(
        "scrapeflow_http_latency_seconds",
        "Time to a good answer from a host (count and sum).",
        labels=["host"],
    )
    for host, t in _busiest(traffic).items():
        requests.add_metric([host], t.requests)
        retries.add_metric([host], t.retries)
        bans.add_metric([host], t.bans + t.captchas)
        latency.add_metric([host], count_value=t.ok, sum_value=t.latency_total)
    yield from (requests, retries, bans, latency)


def _machine(m: Machine, uptime: float) -> Iterator[Metric]:
    yield _gauge("scrapeflow_machine_cpu_percent", "CPU use of the machine, %.", m.cpu_percent)
    yield _gauge("scrapeflow_machine_memory_used_bytes", "Memory in use.", m.memory_used)
    yield _gauge("scrapeflow_machine_memory_total_bytes", "Memory in all.", m.memory_total)
    yield _gauge("scrapeflow_machine_memory_percent", "Memory in use, %.", m.memory_percent)
    for minutes, value in zip((1, 5, 15), m.load, strict=True):
        yield _gauge(f"scrapeflow_machine_load{minutes}", f"Load average, {minutes} min.", value)
    yield _gauge(
        "scrapeflow_process_resident_memory_bytes", "This process's resident memory.", m.rss_bytes
    )
    if m.open_fds is not None:
        yield _gauge("scrapeflow_process_open_fds", "This process's open files.", m.open_fds)
    yield _gauge(
        "scrapeflow_process_start_time_seconds", "When this process started.", m.started_at
    )
    yield _gauge("scrapeflow_process_uptime_seconds", "Seconds since this process started.", uptime)

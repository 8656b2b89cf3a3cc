"""The API's response bodies (the OpenAPI schema at ``/docs`` is built from them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    SecretStr,
    Tag,
    model_validator,
)

from scrapeflow._util.redact import redact_url
from scrapeflow.crawl import (
    MAX_CRAWL_CONCURRENCY,
    MAX_CRAWL_DELAY,
    MAX_CRAWL_DEPTH,
    MAX_CRAWL_PATTERNS,
    MAX_CRAWL_PER_HOST,
    MAX_CRAWL_REQUESTS,
    MAX_CRAWL_SELECTORS,
    MAX_CRAWL_START_URLS,
    CrawlPage,
)
from scrapeflow.executors import (
    MAX_RUN_BATCHES,
    MAX_RUN_DELAY,
    MAX_RUN_EXECUTORS,
    MAX_RUN_PARALLELISM,
    MAX_RUN_PER_HOST,
    MAX_RUN_TASKS,
    MAX_RUN_TIMEOUT,
    ExecutorOutcome,
    RunTaskOutcome,
    executor_names,
)
from scrapeflow.fetch import (
    MAX_FETCH_JOB_CONCURRENCY,
    MAX_FETCH_JOB_DELAY,
    MAX_FETCH_JOB_PER_HOST,
    MAX_FETCH_JOB_SHARDS,
    MAX_FETCH_JOB_URLS,
    MAX_JOB_URL_LENGTH,
    FetchItemOutcome,
)
from scrapeflow.jobs import Job, customer_of
from scrapeflow.status import check_key
from scrapeflow.urllist import check_url

__all__ = [
    "AccessIn",
    "AccessOut",
    "AccessPatch",
    "AccessResultOut",
    "AccountOut",
    "ApiStatsOut",
    "BankOut",
    "CustomerIn",
    "CustomerList",
    "CustomerOut",
    "CustomerPatch",
    "CustomerStatus",
    "ErasureOut",
    "ExecutorOutcomeOut",
    "FetchItemOut",
    "FetchJobIn",
    "FetchJobParamsIn",
    "HttpStatsOut",
    "JobCountsOut",
    "JobIn",
    "JobList",
    "JobOut",
    "JobResults",
    "JobSummaryOut",
    "MachineOut",
    "MovementOut",
    "MovementPage",
    "OneTimeCode",
    "RemovedOut",
    "RunJobIn",
    "RunJobParamsIn",
    "RunTaskIn",
    "RunTaskOut",
    "ScheduleOut",
    "ScheduleRunOut",
    "StatsOut",
    "SyncMovementOut",
    "SyncPage",
]


SHOWN_ITEMS = 20
"""A job's view shows this many items of each list in its params (URLs, tasks), and counts
the rest (``{name}_total``)."""
_SHOWN_TEXT = 2_000
"""Characters of one string of a job's params a view shows (longer ones are cut)."""


class JobSummaryOut(BaseModel):
    """A job as a listing shows it: no params, no results (``GET /v1/jobs/{id}`` has them)."""

    id: str
    kind: str
    state: str
    customer: str | None
    """The customer a bank job works for."""
    submitted_by: str | None
    """The id of the API key that submitted it (fetch and run jobs)."""
    progress: dict[str, int]
    error: str | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> JobSummaryOut:
        return cls(**_summary(job))


class JobOut(JobSummaryOut):
    """A job whole: its summary, what it was given and what it did."""

    outcome: str | None
    """A bank refresh's (or one-time code's) outcome once it ended: ``succeeded``,
    ``partial``, ``needs_action`` or ``failed`` (see the customer's status); null for other
    jobs, or while it runs. The job's ``state`` is the job's: a refresh whose every access
    failed still ``succeeded`` as a job."""
    params: dict[str, Any]
    """What the job was given, bounded: the first 20 items of each list (URLs, tasks) with
    ``{name}_total`` the count; each URL's credentials and secret query values shown as
    ``***``; a sealed secret (``*_sealed``, a one-time code) left out."""
    result: dict[str, Any] | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        params = {k: v for k, v in job.params.items() if not k.endswith("_sealed")}
        outcome = job.result.get("outcome") if isinstance(job.result, dict) else None
        return cls(
            **_summary(job),
            outcome=outcome if isinstance(outcome, str) else None,
            params=_shown_params(params),
            result=job.result,
        )


def _summary(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state.value,
        "customer": job.customer or customer_of(job.params),
        "submitted_by": job.submitted_by,
        "progress": job.progress,
        "error": job.error,
        "attempts": job.attempts,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def _shown_params(params: dict[str, Any]) -> dict[str, Any]:
    """A job's params as a view shows them (see :attr:`JobOut.params`)."""
    shown: dict[str, Any] = {}
    for name, value in params.items():
        if isinstance(value, list) and len(value) > SHOWN_ITEMS:
            shown[f"{name}_total"] = len(value)
        shown[name] = _shown(value)
    return shown


def _shown(value: Any, depth: int = 0) -> Any:
    if depth > 8:  # what a client nested deeper is not shown
        return None
    if isinstance(value, str):
        cut = value if len(value) <= _SHOWN_TEXT else value[:_SHOWN_TEXT] + "…"
        return redact_url(cut) if cut.startswith(("http://", "https://")) else cut
    if isinstance(value, list):
        return [_shown(item, depth + 1) for item in value[:SHOWN_ITEMS]]
    if isinstance(value, dict):
        items = list(value.items())[:SHOWN_ITEMS]
        return {str(k): _shown(v, depth + 1) for k, v in items}
    return value


_JSON_PART = 100
"""Jobs of a listing written at a time (the loop serves others between two parts)."""


class JobList(BaseModel):
    jobs: list[JobSummaryOut]
    """Summaries: no params nor results (``GET /v1/jobs/{id}`` for one job whole)."""
    next_before: str | None
    """Pass as ``before`` for the next (older) page; null at the end."""

    @staticmethod
    async def json_of(
        jobs: Sequence[Job], next_before: str | None, *, part: int = _JSON_PART
    ) -> bytes:
        """The list as JSON, written straight from the jobs: the bytes this model writes,
        without a model per job (a page of 500 is a listing loop's whole cost). Written
        ``part`` jobs at a time, the loop serving other requests between two parts: a client
        listing in a loop does not hold it for a whole page at once."""
        written: list[bytes] = []
        for start in range(0, len(jobs), part):
            if start:
                await asyncio.sleep(0)
            summaries = [_summary(job) for job in jobs[start : start + part]]
            written.append(orjson.dumps(summaries, option=orjson.OPT_UTC_Z)[1:-1])
        return b'{"jobs":[%b],"next_before":%b}' % (b",".join(written), orjson.dumps(next_before))


class AccessOut(BaseModel):
    access_id: int
    bank: str
    login: str
    state: str
    result: str | None
    detail: str | None
    accounts: int
    """Accounts the last scrape read."""
    movements: int
    """Movements the last scrape read."""
    accounts_stored: int = 0
    """Accounts the database held for what the last scrape read: fewer than ``accounts``
    (two read with one bank_ref) ends the access ``site_changed``."""
    movements_stored: int = 0
    """Movements the database held for what the last scrape read."""
    finished_at: datetime | None
    enabled: bool = True
    """False for a disabled access: kept with its data, left out of refreshes and of the
    outcome."""


class CustomerStatus(BaseModel):
    customer: str
    state: str
    all_updated: bool
    """True once the last refresh has ended for every access (the seed's UI flag: finished,
    not succeeded; ``outcome`` says how it went)."""
    outcome: str | None
    """How the last refresh ended: ``succeeded`` (every access read), ``partial`` (some read),
    ``needs_action`` (an access waits for the customer: a code, a password, an unlock),
    ``failed`` (nothing read, or the refresh could not start: ``error`` says why); null before
    the first refresh ended."""
    results: dict[str, int]
    """How many accesses ended with each result code in their last scrape."""
    error: str | None
    """Why the last refresh failed before any access ended (its job's error), else null."""
    refresh_job: JobOut | None
    """The refresh queued or running for this customer, if any."""
    accesses: list[AccessOut]


class AccountOut(BaseModel):
    access_id: int
    bank: str
    bank_ref: str
    iban: str | None
    number: str | None
    alias: str
    type: str
    currency: str
    balance: Decimal
    updated_at: datetime


class MovementOut(BaseModel):
    access_id: int
    """The access it was read through: ``(access_id, account_ref, key)`` is its identity."""
    bank: str
    account_ref: str
    account: str
    key: str
    operation_date: date
    value_date: date
    amount: Decimal
    currency: str
    description: str
    pending: bool
    balance_after: Decimal | None


class MovementPage(BaseModel):
    movements: list[MovementOut]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null at the end."""


class BankOut(BaseModel):
    code: str
    """What an access's ``bank`` is (``formbank``)."""
    name: str
    country: str | None
    """ISO 3166 code, when the scraper says."""


class CustomerIn(BaseModel):
    id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
    """Your id for the customer."""
    name: Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""


class CustomerOut(BaseModel):
    id: str
    name: str
    state: str
    outcome: str | None = None
    """How its enabled accesses' last scrapes ended, together (``succeeded``, ``partial``,
    ``needs_action``, ``failed``; null before any ended). The status also counts a refresh
    that could not start."""
    last_refresh_at: datetime | None = None
    """When its last refresh ended (null before the first)."""


class CustomerList(BaseModel):
    customers: list[CustomerOut]
    """A page, by id."""
    total: int
    """Customers matching ``q`` and ``outcome``, on every page."""
    outcomes: dict[str, int]
    """Customers matching ``q`` by outcome (``none``: not refreshed yet), whatever
    ``outcome`` filters."""
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null at the end."""


class AccessIn(BaseModel):
    bank: Annotated[str, Field(min_length=1, max_length=40)]
    """A registered bank scraper's code (formbank, apibank, legacybank, …)."""
    login: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
    password: Annotated[SecretStr, Field(min_length=1, max_length=1024)]
    """Write-only: encrypted at once, never returned, never logged."""


class AccessPatch(BaseModel):
    password: Annotated[SecretStr | None, Field(min_length=1, max_length=1024)] = None
    """The access's new password: write-only, encrypted at once."""
    enabled: bool | None = None
    """False disables the access (kept with its data, left out of refreshes); true enables
    it again."""

    @model_validator(mode="after")
    def _something(self) -> AccessPatch:
        if self.password is None and self.enabled is None:
            raise ValueError("give password, enabled or both")
        return self


class CustomerPatch(BaseModel):
    name: Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")]


class ErasureOut(BaseModel):
    """The record of an erasure: what, when, how many rows of each kind; never data."""

    erased: str
    """``customer`` or ``access``."""
    at: datetime
    counts: dict[str, int]
    """Rows erased by kind (``accesses``, ``accounts``, ``movements``, ``events``, ``jobs``,
    ``launch_logs``: files)."""


class OneTimeCode(BaseModel):
    code: Annotated[str, Field(pattern=r"^[0-9]{4,10}$")]
    """The code the bank sent the customer (4-10 digits)."""


# -- POST /v1/jobs: what a client may ask for (no code, no path: names and URLs) ---------------


def _http_url(url: str) -> str:
    problem = check_url(url)
    if problem is not None:
        raise ValueError(problem)
    return url


def _task_key(key: str) -> str:
    check_key(key)  # InputError is a ValueError: it becomes the field's error
    return key


def _registered(name: str) -> str:
    known = executor_names()
    if name not in known:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise ValueError(
            f"unknown executor {shown}: executors are chosen by registered name "
            f"(known: {', '.join(known) or 'none'})"
        )
    return name


HttpUrlText = Annotated[
    str, Field(min_length=1, max_length=MAX_JOB_URL_LENGTH), AfterValidator(_http_url)
]
ExecutorName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_registered)]
_INPUT = ConfigDict(extra="forbid", strict=True)


class FetchJobParamsIn(BaseModel):
    """A ``fetch`` job: these URLs into the service's store (the service picks it)."""

    model_config = _INPUT
    urls: Annotated[list[HttpUrlText], Field(min_length=1, max_length=MAX_FETCH_JOB_URLS)]
    """http(s) URLs; one listed twice is fetched once."""
    concurrency: Annotated[int, Field(ge=1, le=MAX_FETCH_JOB_CONCURRENCY)] = 16
    """Fetches in flight (the service's ``parallelism`` caps it)."""
    per_host: Annotated[int, Field(ge=1, le=MAX_FETCH_JOB_PER_HOST)] = 8
    """Fetches in flight per host (the service's ``per_host`` caps it)."""
    delay: Annotated[float, Field(ge=0, le=MAX_FETCH_JOB_DELAY, allow_inf_nan=False)] = 0.0
    """Seconds between two requests to one host."""
    shards: Annotated[int, Field(ge=1, le=MAX_FETCH_JOB_SHARDS)] = 1
    """Split the list into this many shards, each a job of its own that any worker may take
    (the job waits for them, running those still queued itself)."""


class RunTaskIn(BaseModel):
    """A task: its params (what its executors read; ``url`` for ``scrape``) and its key (the
    URL's MD5 when not given)."""

    model_config = _INPUT
    key: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_task_key)] | None = (
        None
    )
    params: dict[str, Any]


def _task_form(value: Any) -> str:
    return "url" if isinstance(value, str) else "task"


TaskSpec = Annotated[
    Annotated[HttpUrlText, Tag("url")] | Annotated[RunTaskIn, Tag("task")],
    Discriminator(_task_form),
]


class RunJobParamsIn(BaseModel):
    """A ``run`` job: tasks through executors named from the registered ones."""

    model_config = _INPUT
    tasks: Annotated[list[TaskSpec], Field(min_length=1, max_length=MAX_RUN_TASKS)]
    """URLs, or tasks with their params."""
    executors: Annotated[list[ExecutorName], Field(min_length=1, max_length=MAX_RUN_EXECUTORS)] = (
        Field(default_factory=lambda: ["scrape"])
    )
    """Registered executor names, run in this order on each task."""
    parallelism: Annotated[int, Field(ge=1, le=MAX_RUN_PARALLELISM)] = 16
    """Tasks in flight (the service's ``parallelism`` caps it)."""
    per_host: Annotated[int, Field(ge=1, le=MAX_RUN_PER_HOST)] = 8
    """Requests in flight per host (the service's ``per_host`` caps it)."""
    delay: Annotated[float, Field(ge=0, le=MAX_RUN_DELAY, allow_inf_nan=False)] = 0.0
    """Seconds between two requests to one host."""
    timeout: Annotated[float, Field(gt=0, le=MAX_RUN_TIMEOUT, allow_inf_nan=False)] | None = None
    """Seconds per task; the service's ``timeout`` when not given."""
    batches: Annotated[int, Field(ge=1, le=MAX_RUN_BATCHES)] = 1
    """Split the tasks into this many batches, each a job of its own that any worker may take
    (the job waits for them, running those still queued itself)."""


Selector = Annotated[str, Field(min_length=1, max_length=2_000)]


class CrawlJobParamsIn(BaseModel):
    """A ``crawl`` job: start URLs, links to follow, fields of one item per page."""

    model_config = _INPUT
    start_urls: Annotated[list[HttpUrlText], Field(min_length=1, max_length=MAX_CRAWL_START_URLS)]
    follow: Annotated[list[Selector], Field(max_length=MAX_CRAWL_SELECTORS)] = Field(
        default_factory=list
    )
    """CSS selectors of the links to follow (``ul.links a``)."""
    items: Annotated[list[Selector], Field(max_length=50)] = Field(default_factory=list)
    """Item fields, ``NAME=EXPR``: a CSS selector's first match, ``all:CSS`` every match,
    ``xpath:…``, or ``@url``, ``@status``, ``@depth``. None: the crawl keeps no items."""
    max_depth: Annotated[int, Field(ge=0, le=MAX_CRAWL_DEPTH)] | None = 2
    """Links followed from a start URL at most; null: no bound but ``max_requests``."""
    max_requests: Annotated[int, Field(ge=1, le=MAX_CRAWL_REQUESTS)] = 1_000
    strategy: Literal["same-hostname", "same-domain", "same-origin", "all"] = "same-hostname"
    include: Annotated[list[Selector], Field(max_length=MAX_CRAWL_PATTERNS)] = Field(
        default_factory=list
    )
    """Globs a followed URL must match (one of them)."""
    exclude: Annotated[list[Selector], Field(max_length=MAX_CRAWL_PATTERNS)] = Field(
        default_factory=list
    )
    concurrency: Annotated[int, Field(ge=1, le=MAX_CRAWL_CONCURRENCY)] = 16
    """Pages in flight (the service's ``parallelism`` caps it)."""
    per_host: Annotated[int, Field(ge=1, le=MAX_CRAWL_PER_HOST)] = 8
    delay: Annotated[float, Field(ge=0, le=MAX_CRAWL_DELAY, allow_inf_nan=False)] = 0.0
    obey_robots: bool = True


class FetchJobIn(BaseModel):
    """``{"kind": "fetch", "params": {...}}``."""

    model_config = _INPUT
    kind: Literal["fetch"]
    params: FetchJobParamsIn


class RunJobIn(BaseModel):
    """``{"kind": "run", "params": {...}}``."""

    model_config = _INPUT
    kind: Literal["run"]
    params: RunJobParamsIn


class CrawlJobIn(BaseModel):
    """``{"kind": "crawl", "params": {...}}``."""

    model_config = _INPUT
    kind: Literal["crawl"]
    params: CrawlJobParamsIn


class JobIn(RootModel[Annotated[FetchJobIn | RunJobIn | CrawlJobIn, Field(discriminator="kind")]]):
    """A job to create: ``{"kind": "fetch" | "run" | "crawl", "params": {...}}``."""

    @model_validator(mode="before")
    @classmethod
    def _not_a_bank_job(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") in ("bank.refresh", "bank.otp"):
            raise ValueError(
                "bank jobs are not created here: POST /v1/customers/{customer}/refresh "
                "refreshes a customer, POST /v1/customers/{customer}/accesses/{access_id}/otp "
                "gives a one-time code"
            )
        return data


# -- GET /v1/jobs/{job_id}/results -------------------------------------------------------------


class FetchItemOut(BaseModel):
    """One URL of a fetch job: ``stored``, ``failed``, ``pending`` (the job is active) or
    ``not_fetched`` (the job ended before it). URLs are shown with their secrets as ``***``."""

    index: int
    url: str
    outcome: str
    status: int | None
    """The HTTP status of the answer (none when no answer came)."""
    sha384: str | None
    """The stored body's SHA-384 (hex): its name in the store."""
    size: int | None
    """The stored body's size in bytes."""
    final_url: str | None
    error: str | None

    @classmethod
    def of(cls, outcome: FetchItemOutcome) -> FetchItemOut:
        return cls(
            index=outcome.index,
            url=redact_url(outcome.url),
            outcome=outcome.outcome,
            status=outcome.status,
            sha384=outcome.sha384,
            size=outcome.size,
            final_url=None if outcome.final_url is None else redact_url(outcome.final_url),
            error=outcome.error,
        )


class ExecutorOutcomeOut(BaseModel):
    """One executor's part of a task, as saved in the task's status."""

    status: str
    """``SUCCESS``, ``SKIPPED`` (it succeeded in an earlier run) or ``ERROR <Type>::<message>``."""
    output: Any

    @classmethod
    def of(cls, outcome: ExecutorOutcome) -> ExecutorOutcomeOut:
        return cls(status=outcome.status, output=outcome.output)


class RunTaskOut(BaseModel):
    """One task of a run job: ``succeeded``, ``failed``, ``pending`` (the job is active),
    ``not_run`` (the job ended before it) or ``unreadable``; per executor, its status and
    output."""

    index: int
    key: str
    url: str | None
    state: str
    executors: dict[str, ExecutorOutcomeOut]

    @classmethod
    def of(cls, outcome: RunTaskOutcome) -> RunTaskOut:
        return cls(
            index=outcome.index,
            key=outcome.key,
            url=None if outcome.url is None else redact_url(outcome.url),
            state=outcome.state,
            executors={n: ExecutorOutcomeOut.of(e) for n, e in outcome.executors.items()},
        )


class CrawlPageOut(BaseModel):
    """One page of a crawl job: ``succeeded``, ``failed`` (``error``: the error's type),
    ``pending`` (the job is active) or ``not_run``; its items."""

    index: int
    url: str
    state: str
    depth: int | None
    status: int | None
    """The HTTP status of the page's answer (none when no answer was handled)."""
    items: list[dict[str, Any]]
    error: str | None

    @classmethod
    def of(cls, page: CrawlPage) -> CrawlPageOut:
        return cls(
            index=page.index,
            url=redact_url(page.url) if page.url else "",
            state=page.state,
            depth=page.depth,
            status=page.status,
            items=page.items,
            error=page.error,
        )


class AccessResultOut(BaseModel):
    """One access of a bank job, from its result summary."""

    access_id: int
    bank: str
    result: str
    accounts: int
    movements: int


class JobResults(BaseModel):
    """A page of a job's per-item results."""

    job_id: str
    kind: str
    state: str
    items: list[FetchItemOut] | list[RunTaskOut] | list[CrawlPageOut] | list[AccessResultOut]
    """Per item, in the job's order: URLs (``fetch``), tasks (``run``), pages (``crawl``, in
    the order of their fingerprints), accesses (bank jobs)."""
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null at the end."""


class SyncMovementOut(MovementOut):
    """A movement as sync gives it: ``(access_id, account_ref, key)`` is its identity."""


class ScheduleRunOut(BaseModel):
    date: date
    """The day of the run, in the schedule's time zone (one run a day)."""
    fire_at: datetime
    """When the cron expression fired."""
    planned_at: datetime
    """When the run was planned (later than ``fire_at`` when it was made up at a start)."""
    planned: int
    """Customers in the run."""
    submitted: int
    """Their refreshes queued so far (spread over the window)."""
    expired: int
    """Customers whose refresh could not be queued within a day of its time (see the log)."""
    due_until: datetime | None
    """When the last customer's refresh is due."""
    jobs: dict[str, int]
    """The run's refresh jobs by state (queued, running, succeeded, failed, cancelled)."""
    finished_at: datetime | None
    """When the run's last refresh ended; null while any is to come."""


class ScheduleOut(BaseModel):
    enabled: bool
    """False when the ``schedule`` setting is ``off``."""
    cron: str | None
    timezone: str
    window_minutes: float
    """Minutes the run's refreshes are spread over."""
    next_run: datetime | None
    """When the next run starts (null when off)."""
    checked_at: datetime | None
    """When this service last looked for what is due (about once a minute; null when off)."""
    last_run: ScheduleRunOut | None
    runs: list[ScheduleRunOut]
    """The last runs (``?runs=``, 7 by default), newest first."""


class RemovedOut(BaseModel):
    access_id: int
    bank: str
    account_ref: str
    account: str
    key: str


class SyncPage(BaseModel):
    added: list[SyncMovementOut]
    """Movements stored since the cursor, as they are now."""
    modified: list[SyncMovementOut]
    """Movements the client has that changed since (a pending one that posted)."""
    removed: list[RemovedOut]
    """Movements the client has that the bank no longer lists (a withdrawn authorisation)."""
    next_cursor: str
    """Keep it, and pass it as ``cursor`` next time."""
    has_more: bool
    """More changes wait: ask again with ``next_cursor`` now."""


# -- GET /v1/stats -----------------------------------------------------------------------------


class JobCountsOut(BaseModel):
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int


class HttpStatsOut(BaseModel):
    """The outgoing HTTP of the scrapers of the service's process, since it started."""

    requests: int
    """Attempts sent (each retry counts)."""
    retries: int
    bans: int
    """Answers taken for a ban or a CAPTCHA."""
    hosts: int
    """Hosts contacted."""


class ApiStatsOut(BaseModel):
    """The API's answers since the service started."""

    requests: int
    errors: int
    """Answers of status 500 or more."""


class MachineOut(BaseModel):
    cpu_percent: float
    """Of all CPUs, since the previous reading."""
    memory_percent: float
    load: tuple[float, float, float]
    """Load average over 1, 5 and 15 minutes."""
    rss_bytes: int
    """The service process's resident memory."""


class StatsOut(BaseModel):
    """The service's numbers (``/metrics`` has the same, for Prometheus)."""

    jobs: JobCountsOut
    """Jobs in the store by state, every kind together."""
    jobs_by_kind: dict[str, dict[str, int]]
    """Per kind (``bank.refresh``, ``fetch``…), jobs by state."""
    customers: int
    sse_clients: int
    """Event-stream clients connected now."""
    webhook_backlog: int
    """Webhook deliveries pending in the outbox."""
    write_queue_depth: int
    """Bank write batches waiting for a writer."""
    http: HttpStatsOut
    api: ApiStatsOut
    machine: MachineOut
    uptime_seconds: float
    """Seconds since the service's process started."""

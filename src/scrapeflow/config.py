"""One typed :class:`Settings` for everything a scrapeflow process reads from its environment.

The command line, the service and the workers all build one ``Settings`` with
:meth:`Settings.load`. Each value comes from the first of:

1. a command-line flag (passed to :meth:`Settings.load` as ``flags``; ``None`` means "not given");
2. its ``SCRAPEFLOW_*`` environment variable (``SCRAPEFLOW_DB_URL`` for ``db_url``…);
3. a TOML file: ``--config FILE`` or ``SCRAPEFLOW_CONFIG`` (top-level keys are the field names;
   a ``[fetch]`` table holds the bulk fetcher's settings);
4. the default.

Every setting, its variable and its default are listed in ``docs/configuration.md`` (a test keeps
the two in step). Secrets (``vault_keys``, ``sandbox_admin_token``) are read only from the
environment, never from the file or a flag, and never shown by ``repr``. The bulk fetcher keeps
gofetch's own variables (``FETCH_ID``, ``CONCURRENT_FETCHES``, ``AWS_*``…): see
:class:`scrapeflow.fetch.FetchSettings`, which takes this file's ``[fetch]`` table as its file.

>>> Settings.load(flags={"parallelism": 8}).parallelism
8
"""

from __future__ import annotations

import enum
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from scrapeflow._util.egress import parse_egress_allow
from scrapeflow.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_DB_URL",
    "ENV_PREFIX",
    "LogLevel",
    "Settings",
    "parse_bank_urls",
    "parse_egress_allow",
    "read_config_file",
]

ENV_PREFIX = "SCRAPEFLOW_"
CONFIG_ENV = "SCRAPEFLOW_CONFIG"
DEFAULT_DB_URL = "sqlite+aiosqlite:///scrapeflow.db"
_MAX_PARALLELISM = 10_000
"""More tasks in flight than this buys nothing on one machine but memory and open files."""

_file_values: ContextVar[dict[str, Any] | None] = ContextVar("scrapeflow_config_file", default=None)


class LogLevel(enum.StrEnum):
    """How much scrapeflow's structured logs say."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1)]


class Settings(BaseSettings):
    """Every setting of a scrapeflow process, typed, with its default. Build with :meth:`load`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        validate_default=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )
    SECRETS: ClassVar[frozenset[str]] = frozenset({"vault_keys", "sandbox_admin_token"})
    """Settings read only from the environment: never from the file or a flag."""

    # -- storage and logs ----------------------------------------------------------------------
    db_url: str = DEFAULT_DB_URL
    """The bank database (SQLAlchemy async URL): SQLite, PostgreSQL (asyncpg) or MS SQL."""
    log_dir: Path = Path("logs")
    """Where bank refreshes write one log file per launch."""
    log_level: LogLevel = LogLevel.WARNING
    """Structured logs on stderr: DEBUG, INFO, WARNING or ERROR."""
    log_json: bool | None = None
    """Logs as JSON lines (true), pretty (false), or pretty only on a terminal (unset)."""

    # -- bank credentials and sites ------------------------------------------------------------
    vault_keys: SecretStr | None = None
    """Fernet keys for bank credentials, comma-separated, current first (environment only)."""
    vault_key_file: Path | None = None
    """A file of vault keys, one a line, current first (used when vault_keys is unset)."""
    bank_urls: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Each bank's site: ``NAME=URL`` pairs, comma-separated (a TOML table in the file)."""
    sandbox_manifest: Path | None = None
    """A sandbox manifest (``scrapeflow sandbox --manifest``): its banks' URLs and clock."""
    sandbox_admin_token: SecretStr | None = None
    """The sandbox's admin token (environment only); made up and printed when unset."""

    # -- bank launches -------------------------------------------------------------------------
    per_bank: Count = 50
    """Accesses scraped at once at one bank."""
    overall: Count = 200
    """Accesses scraped at once in all."""
    access_timeout: Seconds = 300.0
    """Seconds one access's scrape may take."""
    heartbeat: Seconds = 30.0
    """Seconds between two heartbeats of the accesses a launcher holds."""
    watchdog_minutes: Annotated[float, Field(gt=0, le=10_080, allow_inf_nan=False)] = 15.0
    """Minutes without a heartbeat before the watchdog resets an access (at least 3 of the
    launcher's heartbeat intervals, whatever the limit)."""
    initial_days: Annotated[int, Field(ge=0, le=36_600)] = 14
    """Days of movements read the first time an account is seen."""
    overlap_days: Annotated[int, Field(ge=0, le=3_660)] = 3
    """Days re-read before the newest stored movement (late bookings)."""

    # -- HTTP (scrapeflow run, bank scrapers) --------------------------------------------------
    parallelism: Annotated[int, Field(ge=1, le=_MAX_PARALLELISM)] = 100
    """Tasks (and requests) in flight in a run."""
    timeout: Seconds = 30.0
    """Seconds per task of a run."""
    per_host: Annotated[int, Field(ge=1, le=_MAX_PARALLELISM)] = 16
    """Requests in flight per host, and per proxy exit IP."""
    delay: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    """Minimum seconds between two requests to one host."""
    retries: Annotated[int, Field(ge=0, le=100)] = 3
    """Retries per request (5xx, 429, timeouts, dropped connections)."""
    rotate_after: Annotated[int, Field(ge=1, le=1_000)] = 3
    """Consecutive failures through a proxy before a session changes proxy."""
    identity: str = "browser"
    """Request headers: 'browser' (a coherent browser header set per session) or 'none'."""
    proxies: Path | None = None
    """A proxy list file: one ``http(s)://[user:pass@]host:port`` a line (runs and bank
    refreshes, in the CLI and the service, go out through them only)."""

    # -- the service (scrapeflow serve) --------------------------------------------------------
    api_host: str = "127.0.0.1"
    """Address the service listens on (loopback unless you put it behind a proxy)."""
    api_port: Annotated[int, Field(ge=0, le=65_535)] = 8000
    """Port the service listens on; 0 picks a free one (printed at start)."""
    api_processes: Annotated[int, Field(ge=0, le=256)] = 0
    """Processes serving the API (``serve --processes``), each with its own job queue, over
    the same database; 0: one per core. Limits kept in memory (streams per key, failed keys
    per address) and ``/metrics``' request counts are each process's."""
    api_max_body: Annotated[int, Field(ge=1_024, le=1_073_741_824)] = 1_048_576
    """Bytes a request body may hold; a bigger one is refused (413), and never buffered."""
    jobs_backend: Literal["embedded", "procrastinate"] = "embedded"
    """Who runs the jobs: ``embedded`` (the service itself) or ``procrastinate`` (workers on
    any machines, ``scrapeflow worker``; PostgreSQL only, and the ``distributed`` extra)."""
    job_concurrency: Annotated[int, Field(ge=1, le=1_000)] = 4
    """Fetch and run jobs the service runs at once (refreshes and one-time codes have their own
    lane: ``refresh_concurrency``)."""
    job_heartbeat: Seconds = 5.0
    """Seconds between two heartbeats of running jobs; a job silent for 3 of them is run again."""
    jobs_dir: Path = Path("jobs")
    """Where API jobs write: a ``run`` job's status files and executor output in
    ``{jobs_dir}/run/{job id}`` (on the procrastinate backend the statuses are in the database,
    table ``scrapeflow_task_status``, namespace = the job id: a job may resume elsewhere)."""
    jobs_store: str | None = None
    """Where ``fetch`` jobs store pages (a directory or s3://bucket/prefix); unset: the bulk
    fetcher's store (``[fetch] store``, AWS_STORAGE_BUCKET_NAME), else ``{jobs_dir}/store``."""
    webhook_retry_base: Seconds = 10.0
    """Seconds before a failed webhook delivery is tried again; doubled at each failure (at most
    an hour), with jitter."""
    webhook_give_up: Annotated[float, Field(gt=0, le=720, allow_inf_nan=False)] = 24.0
    """Hours after an event when its undelivered webhook deliveries stop and are marked failed."""
    schedule: str = "0 4 * * *"
    """When the daily refresh of every customer starts: a cron expression (five fields), or
    ``off``. Missed while the service was down, a run is made up if the service starts inside
    its window; a day never gets two runs, restarts or not."""
    schedule_timezone: str = "UTC"
    """The IANA time zone of ``schedule`` (``Europe/Madrid``); daylight saving is followed."""
    schedule_window: Annotated[float, Field(ge=0, le=1_440, allow_inf_nan=False)] = 120.0
    """Minutes over which a scheduled run spreads its customers' refreshes (0: all at once)."""

    refresh_concurrency: Annotated[int, Field(ge=1, le=1_000)] = 4
    """Bank refreshes and one-time codes the service runs at once: their own lane, never
    queued behind fetch or run jobs (``job_concurrency``)."""
    max_jobs_per_key: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    """Fetch and run jobs one API key may have queued or running; past it, 429."""

    # -- what clients may hold and reach (docs/security.md) ------------------------------------
    egress_allow: Annotated[tuple[str, ...], NoDecode] = ()
    """Addresses the egress policy lets client-given URLs reach although their class is blocked
    (loopback, private ranges…): CIDRs and host names, comma-separated (an on-premises webhook
    receiver, the sandbox)."""
    egress_proxy: SecretStr | None = None
    """An HTTP proxy every request made for a client goes through (webhooks, fetch and run
    jobs); unset: ``HTTPS_PROXY`` / ``HTTP_PROXY`` (minus ``NO_PROXY``) if set, else direct."""
    max_streams_per_key: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    """Event streams one API key may hold open at once; past it, 429."""
    max_streams: Annotated[int, Field(ge=1, le=1_000_000)] = 2_000
    """Event streams the service holds open at once, every key together; past it, 429."""
    key_time_share: Annotated[float, Field(gt=0, le=1_000)] = 0.5
    """The share of a ``serve`` process's time one API key's requests may hold (in flight)
    while other keys' requests are being served; past it, its requests wait their turn (at
    most 10 s, else 429). A key alone is never held."""
    forwarded_allow_ips: Annotated[tuple[str, ...], NoDecode] = ()
    """Peers (addresses or CIDRs, comma-separated) whose ``X-Forwarded-For`` (and
    ``X-Forwarded-Proto``) headers are believed: your reverse proxies (``Forwarded`` is never
    read). Unset: none, the peer's address is the client's."""
    api_keep_alive: Seconds = 5.0
    """Seconds an idle keep-alive connection stays open before the service closes it."""
    api_header_timeout: Seconds = 10.0
    """Seconds a client has to send a request's headers once it connected (or once its last
    answer ended); past them the connection is closed (slow clients cannot hold sockets)."""
    api_docs: bool = False
    """Serve the interactive API docs (``/docs``, ``/redoc``); ``/openapi.json`` is always on."""

    # -- the bulk fetcher ----------------------------------------------------------------------
    fetch: dict[str, Any] = Field(default_factory=dict)
    """The ``[fetch]`` table of the config file, as :class:`scrapeflow.fetch.FetchSettings`
    reads it (gofetch's variables still win over it)."""

    @field_validator("bank_urls", mode="before")
    @classmethod
    def _parse_bank_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_bank_urls([value])
        if isinstance(value, list | tuple):
            return parse_bank_urls([str(item) for item in value])
        if isinstance(value, Mapping):
            return {str(k): _check_url(str(k), str(v)) for k, v in value.items()}
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level_any_case(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.upper() not in LogLevel.__members__:
                raise ValueError(f"must be one of {', '.join(LogLevel)}")
            return value.upper()
        return value

    @field_validator("jobs_backend")
    @classmethod
    def _distributed_needs_postgresql(cls, value: str, info: ValidationInfo) -> str:
        url = str(info.data.get("db_url", ""))
        if value == "procrastinate" and not url.startswith("postgresql"):
            from scrapeflow.db._errors import shown_url

            raise ValueError(
                "'procrastinate' runs on PostgreSQL: db_url must be postgresql://…, "
                f"got {shown_url(url)!r}"
            )
        return value

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: str) -> str:
        from datetime import UTC, datetime

        from croniter import CroniterBadDateError, croniter

        value = " ".join(value.split())
        if value.lower() in ("", "off"):
            return "off"
        if len(value.split()) != 5 or not croniter.is_valid(value):
            raise ValueError("must be a five-field cron expression ('0 4 * * *') or 'off'")
        try:  # February 31st is valid cron, and never comes
            croniter(value, datetime(2026, 1, 1, tzinfo=UTC)).get_next(datetime)
        except CroniterBadDateError:
            raise ValueError("the cron expression never fires") from None
        return value

    @field_validator("schedule_timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("must be an IANA time zone such as 'Europe/Madrid' or 'UTC'") from None
        return value

    @field_validator("egress_allow", mode="before")
    @classmethod
    def _parse_egress_allow(cls, value: Any) -> Any:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            return parse_egress_allow([str(item) for item in items])
        return value

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _parse_forwarded(cls, value: Any) -> Any:

        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        peers = tuple(str(item).strip() for item in items if str(item).strip())
        for peer in peers:
            if peer == "*":
                continue
            try:
                ipaddress.ip_network(peer, strict=False)
            except ValueError:
                raise ValueError(f"{peer!r} is not an IP address or CIDR (or '*')") from None
        return peers

    @field_validator("egress_proxy")
    @classmethod
    def _check_egress_proxy(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if not value.get_secret_value().strip().startswith(("http://", "https://")):
            raise ValueError("must be an http(s):// proxy URL")
        return SecretStr(value.get_secret_value().strip())

    @field_validator("identity")
    @classmethod
    def _check_identity(cls, value: str) -> str:
        if value not in ("browser", "none"):
            raise ValueError("must be 'browser' or 'none'")
        return value

    @classmethod
    def load(
        cls,
        *,
        config: Path | None = None,
        flags: Mapping[str, Any] | None = None,
        flag_names: Mapping[str, str] | None = None,
    ) -> Settings:
        """Settings from ``flags`` (``None`` values are "not given"), the environment, the TOML
        file (``config``, else ``SCRAPEFLOW_CONFIG``) and the defaults, in that order.
        ``flag_names`` names the flag of a setting in errors when it is not ``--setting-name``.

        Raises :class:`~scrapeflow.errors.ConfigError` naming the setting and where it came from.
        """
        given = {k: v for k, v in (flags or {}).items() if v is not None}
        secret_flags = cls.SECRETS & set(given)
        if secret_flags:
            raise ConfigError(
                f"{', '.join(sorted(secret_flags))}: a secret is read from the environment only"
            )
        from_env = os.environ.get(CONFIG_ENV, "").strip()
        path = config or (Path(from_env) if from_env else None)
        file_values = read_config_file(path) if path is not None else {}
        token = _file_values.set(file_values)
        try:
            return cls(**given)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, given, file_values, path, flag_names or {})) from None
        finally:
            _file_values.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _ConfigFileSource(settings_cls))

    def variable(self, name: str) -> str:
        """The environment variable of setting ``name``."""
        return ENV_PREFIX + name.upper()


class _ConfigFileSource(InitSettingsSource):
    """The TOML file's values, below flags and the environment."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls, dict(_file_values.get() or {}))


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a TOML file: top-level keys are setting names, ``[fetch]`` the fetcher's."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a TOML config file ({exc})") from None
    unknown = sorted(set(data) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    secrets = sorted(Settings.SECRETS & set(data))
    if secrets:
        raise ConfigError(
            f"{path}: {', '.join(secrets)} belong(s) in the environment, not in a file"
        )
    return data


def parse_bank_urls(items: list[str]) -> dict[str, str]:
    """``["formbank=https://…,apibank=https://…", …]`` → ``{name: url}``; a bad pair raises."""
    urls: dict[str, str] = {}
    for item in items:
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            name, sep, url = part.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"{part!r} is not NAME=URL (formbank=https://…)")
            urls[name.strip()] = _check_url(name.strip(), url.strip())
    return urls


def _check_url(name: str, url: str) -> str:
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise ValueError(f"the URL of bank {name!r} must be http(s)://…")
    return url.rstrip("/")


def _describe(
    exc: ValidationError,
    given: Mapping[str, Any],
    file_values: Mapping[str, Any],
    path: Any,
    flag_names: Mapping[str, str],
) -> str:
    """One line: the first bad setting, where its value came from, what is wrong, and the value
    given (never for a secret)."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else "settings"
    if name in given:
        source = flag_names.get(name, f"--{name.replace('_', '-')}")
    elif name in file_values:
        source = f"{path}: {name}"
    else:
        source = ENV_PREFIX + name.upper()
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if (
        name not in Settings.SECRETS
        and isinstance(value, str | int | float)
        and ", got " not in message
    ):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        message += f", got {shown}"
    return f"{source}: {message}"

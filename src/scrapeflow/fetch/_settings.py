"""The fetcher's settings: gofetch's environment variables, a TOML file, and command-line flags.

Precedence: command-line flags, then environment variables, then the TOML file, then defaults.

=========================  ===============================  ==================================
environment (as gofetch)   TOML key (``[fetch]`` table)      meaning, default
=========================  ===============================  ==================================
FETCH_ID                   ``fetch_id`` (a string)           this fetch's id; made up (5 digits)
                                                             and printed when not given
FETCH_OFFSET               ``offset``                        first item of the list, 0
FETCH_LIMIT                ``limit``                         items to fetch, all
CONCURRENT_FETCHES         ``concurrent_fetches``            fetches in flight per CPU, 25
                                                             (at most 10,000)
CONCURRENT_S3WRITERS       ``concurrent_writers``            store writers per CPU, 4
                                                             (at most 1,000)
MAX_CPUS                   ``max_cpus``                      processes, the machine's CPUs
                                                             (at most 1,024)
LOG_LEVEL                  ``log_level``                     DEBUG, INFO, WARNING or ERROR; INFO
REDIS_URL                  ``redis_url``                     push stored items there (optional)
AWS_STORAGE_BUCKET_NAME    ``bucket``                        the S3 bucket (mandatory for S3)
AWS_ACCESS_KEY_ID          —                                 S3 key (mandatory for S3)
AWS_SECRET_ACCESS_KEY      —                                 S3 secret (mandatory for S3)
AWS_ENDPOINT_URL           ``endpoint_url``                  an S3-compatible endpoint
AWS_CONFIG_FILE            —                                 the TOML file to read (the seed's
                                                             XML config, as TOML); only a
                                                             ``.toml`` path, as the AWS CLI uses
                                                             the same name for its INI file
=========================  ===============================  ==================================

Also in the file: ``program`` and ``store`` (strings), ``indexes`` (a list of index names),
``default_processor`` (a string) and ``warc`` (true or false).

The seed's XML configuration maps to TOML as: ``<indexes>`` → ``indexes = ["url_sha384"]``
(the canonical ``sha384_checksum`` index is always on), parser names and metadata per source →
the list's processor column (``default_processor`` gives the name for rows that have none).
Credentials are only ever read from the environment: never from a file or a command line.

Every value is checked before anything is fetched or written: a value of the wrong type or out of
bounds is a :class:`~scrapeflow.errors.ConfigError` naming where it came from (the flag, the
variable, or the file and key). The maximums keep a typo from starting millions of workers: a
run never has more processes than the machine has CPUs, nor more fetchers or writers in a
process than it has URLs.
"""

from __future__ import annotations

import os
import random
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapeflow.errors import ConfigError, MissingExtra, MissingSetting

__all__ = [
    "MAX_CONCURRENT_FETCHES",
    "MAX_CONCURRENT_WRITERS",
    "MAX_CPUS",
    "FetchSettings",
]

MAX_CONCURRENT_FETCHES = 10_000
"""Fetches in flight per process, at most (the engine's ``--parallelism`` bound)."""
MAX_CONCURRENT_WRITERS = 1_000
"""Store writers per process, at most."""
MAX_CPUS = 1_024
"""Processes, at most (and never more than the machine's CPUs)."""
_MAX_ITEMS = 10**12  # offset and limit: a list of a trillion lines is already absurd

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_ENV = {
    "fetch_id": "FETCH_ID",
    "offset": "FETCH_OFFSET",
    "limit": "FETCH_LIMIT",
    "concurrent_fetches": "CONCURRENT_FETCHES",
    "concurrent_writers": "CONCURRENT_S3WRITERS",
    "max_cpus": "MAX_CPUS",
    "log_level": "LOG_LEVEL",
    "redis_url": "REDIS_URL",
    "bucket": "AWS_STORAGE_BUCKET_NAME",
    "endpoint_url": "AWS_ENDPOINT_URL",
}
_FLAGS = {
    "store": "--store",
    "program": "--program",
    "fetch_id": "--fetch-id",
    "offset": "--offset",
    "limit": "--limit",
    "max_cpus": "--cpus",
    "concurrent_fetches": "--concurrency",
    "concurrent_writers": "--writers",
    "warc": "--warc",
    "redis_url": "--redis-url",
}
# name: (lowest, highest) for the whole numbers
_BOUNDS = {
    "offset": (0, _MAX_ITEMS),
    "limit": (1, _MAX_ITEMS),
    "concurrent_fetches": (1, MAX_CONCURRENT_FETCHES),
    "concurrent_writers": (1, MAX_CONCURRENT_WRITERS),
    "max_cpus": (1, MAX_CPUS),
}
_STRINGS = (
    "store",
    "program",
    "fetch_id",
    "log_level",
    "redis_url",
    "bucket",
    "endpoint_url",
    "default_processor",
)
_FILE_KEYS = set(_ENV) | {"indexes", "program", "store", "default_processor", "warc"}
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_FETCH_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def _machine_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on (taskset, cgroups)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class FetchSettings:
    """Everything one ``scrapeflow fetch`` needs. Build with :meth:`resolve`; values are checked
    either way (:class:`~scrapeflow.errors.ConfigError` naming the setting)."""

    store: str
    program: str = "gofetch"
    fetch_id: str = ""
    offset: int = 0
    limit: int | None = None
    concurrent_fetches: int = 25
    concurrent_writers: int = 4
    max_cpus: int = field(default_factory=_machine_cpus)
    log_level: str = "INFO"
    redis_url: str | None = None
    bucket: str | None = None
    endpoint_url: str | None = None
    indexes: tuple[str, ...] = ("sha384_checksum", "url_sha384")
    default_processor: str = ""
    warc: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    new_fetch_id: bool = False
    """Whether ``fetch_id`` was made up here (none given: a new fetch, as gofetch does)."""

    def __post_init__(self) -> None:
        for name in (*_STRINGS, *_BOUNDS, "indexes", "warc"):
            value = getattr(self, name)
            if value is None and name not in ("store", "program", "fetch_id"):
                continue
            checked = _check(name, value, name)
            if checked is not value:
                object.__setattr__(self, name, checked)
        if "sha384_checksum" not in self.indexes:
            object.__setattr__(self, "indexes", ("sha384_checksum", *self.indexes))

    @property
    def processes(self) -> int:
        """Processes a run may use: ``max_cpus``, but never more than the machine's CPUs."""
        return max(1, min(self.max_cpus, _machine_cpus()))

    @classmethod
    def resolve(
        cls,
        flags: dict[str, Any],
        environ: dict[str, str] | None = None,
        *,
        file_values: Mapping[str, Any] | None = None,
        file_name: str | None = None,
    ) -> FetchSettings:
        """Merge flags (None means "not given"), the environment and the TOML file.

        ``file_values`` is the ``[fetch]`` table of scrapeflow's own config file
        (:attr:`scrapeflow.config.Settings.fetch`), called ``file_name`` in messages; a fetch
        config file (``config`` flag or ``AWS_CONFIG_FILE``) wins over it. Every value is
        checked here, and a bad one is a :class:`~scrapeflow.errors.ConfigError` naming its
        flag, variable, or file and key.
        """
        env = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        if file_values:
            where = f"{file_name} [fetch]" if file_name else "the config file's [fetch] table"
            values.update(_check_table(dict(file_values), where))
        config_file = flags.get("config") or _our_config_file(env.get("AWS_CONFIG_FILE", ""))
        if config_file:
            values.update(_read_toml(Path(config_file)))
        for name, variable in _ENV.items():
            text = env.get(variable, "").strip()
            if text:
                values[name] = _check(name, _from_text(name, text, variable), variable)
        for name, value in flags.items():
            if value is not None and name != "config":
                if name not in _FLAGS and name not in _FILE_KEYS:
                    raise ConfigError(f"unknown fetch setting {name!r}")
                values[name] = _check(name, value, _FLAGS.get(name, name))
        if not values.get("store"):
            if not values.get("bucket"):
                raise MissingSetting("--store", "give a directory or s3://bucket/prefix")
            values["store"] = f"s3://{values['bucket']}"
        if not values.get("fetch_id"):
            values["fetch_id"] = f"{random.randrange(10**5):05d}"
            values["new_fetch_id"] = True
        settings = cls(**values)
        if settings.store.startswith("s3://"):
            object.__setattr__(settings, "storage_options", _s3_options(settings, env))
        return settings


def _check(name: str, value: Any, source: str) -> Any:
    """``value`` for setting ``name``, checked (and normalised); ``source`` names it in errors."""
    if name in _BOUNDS:
        return _whole_number(name, value, source)
    if name in _STRINGS:
        if not isinstance(value, str):
            hint = f' (quote it: {name} = "{value}")' if isinstance(value, int | float) else ""
            raise ConfigError(f"{source} must be a string, got {_shown(value)}{hint}")
        return _check_string(name, value, source)
    if name == "indexes":
        return _check_indexes(value, source)
    if name == "warc":
        if not isinstance(value, bool):
            raise ConfigError(f"{source} must be true or false, got {_shown(value)}")
        return value
    return value


def _whole_number(name: str, value: Any, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{source} must be a whole number, got {_shown(value)}")
    low, high = _BOUNDS[name]
    if not low <= value <= high:
        raise ConfigError(f"{source} must be between {low:,} and {high:,}, got {_shown(value)}")
    return value


def _check_string(name: str, value: str, source: str) -> str:
    if name == "log_level":
        if value.upper() not in _LEVELS:
            raise ConfigError(f"{source} must be one of {', '.join(_LEVELS)}, got {_shown(value)}")
        return value.upper()
    if name == "fetch_id":
        if not _FETCH_ID.fullmatch(value):
            raise ConfigError(
                f"{source} must be letters, digits, - or _ (at most 200), got {_shown(value)}"
            )
        return value
    if name == "program":
        from scrapeflow.storage._types import check_name

        try:
            return check_name("program", value)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    if name == "redis_url":
        if not value.startswith(_REDIS_SCHEMES):
            from scrapeflow._util.redact import redact

            raise ConfigError(
                f"{source} must be a redis://, rediss:// or unix:// URL, got {redact(value)!r}"
            )
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:
            raise MissingExtra("pushing to Redis", "redis") from exc
        return value
    if name == "default_processor" and any(c in value for c in "\t\r\n"):
        raise ConfigError(f"{source} must not hold a tab or a line break")
    if name == "store":
        if not value.strip():
            raise ConfigError(f"{source} is empty: give a directory or s3://bucket/prefix")
        if any(c in value for c in "\t\r\n"):  # it starts every index line's location field
            raise ConfigError(f"{source} must not hold a tab or a line break")
    return value


def _check_indexes(value: Any, source: str) -> tuple[str, ...]:
    from scrapeflow.storage import index_names

    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(
            f'{source} must be a list of index names (indexes = ["url_sha384"]), '
            f"got {_shown(value)}"
        )
    known = index_names()
    for name in value:
        if not isinstance(name, str) or name not in known:
            raise ConfigError(
                f"{source}: unknown index {_shown(name)}; registered: {', '.join(known)}"
            )
    return tuple(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _our_config_file(path: str) -> str | None:
    """AWS_CONFIG_FILE is also the AWS CLI's INI file: only a ``.toml`` one is ours."""
    return path if path.endswith(".toml") else None


def _from_text(name: str, text: str, source: str) -> Any:
    """An environment variable's text as the setting's type."""
    if name in _BOUNDS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{source} must be a whole number, got {_shown(text)}") from None
    return text


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a TOML config file ({exc})") from None
    table = data.get("fetch", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [fetch] must be a table")
    return _check_table(table, str(path))


def _check_table(table: dict[str, Any], where: str) -> dict[str, Any]:
    if "access_key" in table or "secret_key" in table:
        raise ConfigError(f"{where}: credentials belong in the environment, not in a file")
    unknown = set(table) - _FILE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    return {key: _check(key, value, f"{where}: {key}") for key, value in table.items()}


def _s3_options(settings: FetchSettings, env: dict[str, str]) -> dict[str, Any]:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not env.get(variable):
            raise MissingSetting(variable, "an S3 store needs credentials in the environment")
    options: dict[str, Any] = {
        "key": env["AWS_ACCESS_KEY_ID"],
        "secret": env["AWS_SECRET_ACCESS_KEY"],
    }
    if settings.endpoint_url:
        options["endpoint_url"] = settings.endpoint_url
    return options

"""The fetcher's settings: gofetch's environment variables, a TOML file, and command-line flags.

Precedence: command-line flags, then environment variables, then the TOML file, then defaults.

=========================  ===============================  ==================================
environment (as gofetch)   TOML key (``[fetch]`` table)      meaning, default
=========================  ===============================  ==================================
FETCH_ID                   ``fetch_id``                      this fetch's id; made up (5 digits)
                                                             and printed when not given
FETCH_OFFSET               ``offset``                        first item of the list, 0
FETCH_LIMIT                ``limit``                         items to fetch, all
CONCURRENT_FETCHES         ``concurrent_fetches``            fetches in flight per CPU, 25
CONCURRENT_S3WRITERS       ``concurrent_writers``            store writers per CPU, 4
MAX_CPUS                   ``max_cpus``                      processes, the machine's CPUs
LOG_LEVEL                  ``log_level``                     INFO
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

The seed's XML configuration maps to TOML as: ``<indexes>`` → ``indexes = ["url_sha384"]``
(the canonical ``sha384_checksum`` index is always on), parser names and metadata per source →
the list's processor column (``[fetch.processors]`` gives a default processor name).
Credentials are only ever read from the environment: never from a file or a command line.
"""

from __future__ import annotations

import os
import random
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapeflow.errors import ConfigError, MissingSetting

__all__ = ["FetchSettings"]

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
_INTS = {"offset", "limit", "concurrent_fetches", "concurrent_writers", "max_cpus"}
_FILE_KEYS = set(_ENV) | {"indexes", "program", "store", "default_processor", "warc"}


@dataclass(frozen=True)
class FetchSettings:
    """Everything one ``scrapeflow fetch`` needs. Build with :meth:`resolve`."""

    store: str
    program: str = "gofetch"
    fetch_id: str = ""
    offset: int = 0
    limit: int | None = None
    concurrent_fetches: int = 25
    concurrent_writers: int = 4
    max_cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    log_level: str = "INFO"
    redis_url: str | None = None
    bucket: str | None = None
    endpoint_url: str | None = None
    indexes: tuple[str, ...] = ("sha384_checksum", "url_sha384")
    default_processor: str = ""
    warc: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def resolve(
        cls,
        flags: dict[str, Any],
        environ: dict[str, str] | None = None,
        *,
        file_values: Mapping[str, Any] | None = None,
    ) -> FetchSettings:
        """Merge flags (None means "not given"), the environment and the TOML file.

        ``file_values`` is the ``[fetch]`` table of scrapeflow's own config file
        (:attr:`scrapeflow.config.Settings.fetch`); a fetch config file (``config`` flag or
        ``AWS_CONFIG_FILE``) wins over it.
        """
        env = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        if file_values:
            values.update(_check_table(dict(file_values), "the config file's [fetch] table"))
        config_file = flags.get("config") or _our_config_file(env.get("AWS_CONFIG_FILE", ""))
        if config_file:
            values.update(_read_toml(Path(config_file)))
        for name, variable in _ENV.items():
            if env.get(variable, "").strip():
                values[name] = _typed(name, env[variable].strip(), variable)
        for name, value in flags.items():
            if value is not None and name != "config":
                values[name] = value
        if not values.get("store"):
            if not values.get("bucket"):
                raise MissingSetting("--store", "give a directory or s3://bucket/prefix")
            values["store"] = f"s3://{values['bucket']}"
        if not values.get("fetch_id"):
            values["fetch_id"] = f"{random.randrange(10**5):05d}"
        if isinstance(values.get("indexes"), list):
            values["indexes"] = tuple(values["indexes"])
        settings = cls(**values)
        settings._check()
        if settings.store.startswith("s3://"):
            object.__setattr__(settings, "storage_options", _s3_options(settings, env))
        return settings

    def _check(self) -> None:
        for name in ("concurrent_fetches", "concurrent_writers", "max_cpus"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_ENV[name]} must be at least 1, got {getattr(self, name)}")
        if self.offset < 0 or (self.limit is not None and self.limit < 1):
            raise ConfigError("FETCH_OFFSET must be >= 0 and FETCH_LIMIT >= 1")
        if not self.fetch_id.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"FETCH_ID must be letters, digits, - or _, got {self.fetch_id!r}")
        if "sha384_checksum" not in self.indexes:
            object.__setattr__(self, "indexes", ("sha384_checksum", *self.indexes))


def _our_config_file(path: str) -> str | None:
    """AWS_CONFIG_FILE is also the AWS CLI's INI file: only a ``.toml`` one is ours."""
    return path if path.endswith(".toml") else None


def _typed(name: str, text: str, source: str) -> Any:
    if name in _INTS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{source} must be a whole number, got {text!r}") from None
    return text


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
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
    return {k: _typed(k, str(v), f"{where}: {k}") if k in _INTS else v for k, v in table.items()}


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

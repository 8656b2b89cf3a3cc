"""One typed Settings: precedence, validation, secrets, and docs/configuration.md kept in step."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from scrapeflow.config import Settings
from scrapeflow.errors import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _shown(default: Any) -> str:
    if default is None or default in ({}, ()):
        return "unset"
    if isinstance(default, Enum):
        return str(default.value)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_the_documented_table_matches_the_model() -> None:
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| `([^`]*)` \|", DOC.read_text(), re.MULTILINE)
    documented = {name: (variable, default) for name, variable, default in rows}
    model = {
        name: (f"SCRAPEFLOW_{name.upper()}", _shown(field.get_default(call_default_factory=True)))
        for name, field in Settings.model_fields.items()
    }
    assert documented == model


def test_flags_win_over_variables_which_win_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "scrapeflow.toml"
    config.write_text('parallelism = 5\ntimeout = 7.5\nlog_dir = "from-file"\n')
    monkeypatch.setenv("SCRAPEFLOW_PARALLELISM", "6")
    monkeypatch.setenv("SCRAPEFLOW_DELAY", "0.25")
    settings = Settings.load(config=config, flags={"parallelism": 9, "retries": None})
    assert settings.parallelism == 9  # flag over variable over file
    assert settings.delay == 0.25  # variable
    assert settings.timeout == 7.5  # file
    assert settings.log_dir == Path("from-file")
    assert settings.retries == 3  # default: None is "not given"
    assert Settings.load(config=config).parallelism == 6


def test_the_config_file_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "other.toml"
    config.write_text("initial_days = 90\n[bank_urls]\nformbank = 'https://bank.example/'\n")
    monkeypatch.setenv("SCRAPEFLOW_CONFIG", str(config))
    settings = Settings.load()
    assert settings.initial_days == 90
    assert settings.bank_urls == {"formbank": "https://bank.example"}


def test_bank_urls_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLOW_BANK_URLS", "formbank=http://127.0.0.1:1/, apibank=https://a.b")
    assert Settings.load().bank_urls == {
        "formbank": "http://127.0.0.1:1",
        "apibank": "https://a.b",
    }
    monkeypatch.setenv("SCRAPEFLOW_BANK_URLS", "formbank=ftp://x")
    with pytest.raises(ConfigError, match=r"^SCRAPEFLOW_BANK_URLS: the URL of bank 'formbank'"):
        Settings.load()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"parallelism": 10**20}, r"^--parallelism: .*less than or equal to 10000"),
        ({"parallelism": 0}, r"^--parallelism: .*greater than or equal to 1"),
        ({"timeout": float("inf")}, r"^--timeout: .*finite"),
        ({"timeout": float("nan")}, r"^--timeout: .*finite"),
        ({"access_timeout": -1.0}, r"^--access-timeout: .*greater than 0"),
        ({"identity": "bogus"}, r"^--identity: must be 'browser' or 'none', got 'bogus'"),
        ({"log_level": "loud"}, r"^--log-level: must be one of DEBUG"),
        ({"no_such_setting": 1}, r"^--no-such-setting: "),
    ],
)
def test_bad_values_are_one_line_naming_the_setting(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        Settings.load(flags=flags)
    assert "\n" not in str(caught.value)


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "scrapeflow.toml"
    config.write_text('per_bank = "many"\n')
    with pytest.raises(ConfigError, match=r"scrapeflow.toml: per_bank: .*integer"):
        Settings.load(config=config)
    config.write_text("perbank = 3\n")
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) perbank"):
        Settings.load(config=config)
    config.write_text("per_bank = [\n")
    with pytest.raises(ConfigError, match="not a TOML config file"):
        Settings.load(config=config)
    with pytest.raises(ConfigError, match="no such config file"):
        Settings.load(config=tmp_path / "missing.toml")


def test_secrets_come_from_the_environment_only_and_are_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "scrapeflow.toml"
    config.write_text('vault_keys = "k"\n')
    with pytest.raises(ConfigError, match=r"belong.* in the environment"):
        Settings.load(config=config)
    with pytest.raises(ConfigError, match="environment only"):
        Settings.load(flags={"sandbox_admin_token": "t0ken"})
    monkeypatch.setenv("SCRAPEFLOW_VAULT_KEYS", "super-secret-key")
    monkeypatch.setenv("SCRAPEFLOW_SANDBOX_ADMIN_TOKEN", "super-secret-token")
    settings = Settings.load()
    assert settings.vault_keys is not None
    assert settings.vault_keys.get_secret_value() == "super-secret-key"
    assert "super-secret" not in repr(settings) + str(settings)


def test_the_fetch_table_is_handed_to_the_fetcher(tmp_path: Path) -> None:
    from scrapeflow.fetch import FetchSettings

    config = tmp_path / "scrapeflow.toml"
    config.write_text("[fetch]\nconcurrent_fetches = 64\nindexes = ['url_sha384']\n")
    settings = Settings.load(config=config)
    fetch = FetchSettings.resolve(
        {"store": str(tmp_path / "store")}, environ={}, file_values=settings.fetch
    )
    assert fetch.concurrent_fetches == 64
    assert fetch.indexes == ("sha384_checksum", "url_sha384")
    gofetch = FetchSettings.resolve(
        {"store": str(tmp_path / "store")},
        environ={"CONCURRENT_FETCHES": "8"},
        file_values=settings.fetch,
    )
    assert gofetch.concurrent_fetches == 8  # gofetch's variable wins over the file


def test_the_default_database_is_the_one_the_db_layer_defaults_to() -> None:
    from scrapeflow.db import DEFAULT_URL

    assert Settings.load().db_url == DEFAULT_URL

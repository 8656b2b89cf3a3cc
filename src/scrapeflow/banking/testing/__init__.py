"""The bank scraper kit: record a live session once, replay it offline, compare what the
scraper read with a golden file (docs/writing-a-bank.md).

Record (``scrapeflow bank record``, or in code)::

    scrape, recording = await record("mybank", login=..., password=..., base_url=...)
    recording.save("tests/recordings/session.har")      # redacted

Replay, in a test (no bank, no database)::

    from scrapeflow.banking.testing import replay

    async def test_reads_the_recorded_session():
        await replay("tests/recordings/session.har", golden="tests/recordings/session.json")

A replay feeds the scraper the placeholders the recording holds (``REDACTED-LOGIN``,
``REDACTED-PASSWORD``, ``REDACTED-OTP``) and the day it was recorded; a request the recording
lacks raises :class:`~scrapeflow.errors.NotRecorded`; what was read differing from the golden
file raises :class:`~scrapeflow.errors.GoldenMismatch`. ``pytest --update-golden`` (or
``SCRAPEFLOW_UPDATE_GOLDEN=1``) writes the golden files anew instead.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Iterable
from datetime import date
from pathlib import Path

from scrapeflow.banking._registry import get_scraper
from scrapeflow.banking._results import ResultCode
from scrapeflow.banking._scraper import BasicScraper, IncrementalPolicy
from scrapeflow.banking.testing._golden import UPDATE_ENV, check_golden, golden_of
from scrapeflow.banking.testing._offline import MemoryWriter, OfflineScrape, scrape_offline
from scrapeflow.banking.testing._recording import RecordedExchange, Recorder, Recording
from scrapeflow.banking.testing._redact import (
    SECRET_FIELD,
    VOLATILE_FIELDS,
    Redactor,
    normalized_name,
)
from scrapeflow.banking.testing._replay import ReplayWire, request_key
from scrapeflow.http import HostPolicy, HttpClient, HttpConfig, Observer, RetryPolicy

__all__ = [
    "LOGIN",
    "OTP",
    "PASSWORD",
    "SECRET_FIELD",
    "UPDATE_ENV",
    "VOLATILE_FIELDS",
    "CodeSource",
    "MemoryWriter",
    "OfflineScrape",
    "RecordedExchange",
    "Recorder",
    "Recording",
    "Redactor",
    "ReplayWire",
    "check_golden",
    "golden_of",
    "normalized_name",
    "record",
    "replay",
    "request_key",
    "scrape_offline",
]

LOGIN = "REDACTED-LOGIN"
PASSWORD = "REDACTED-PASSWORD"  # noqa: S105  (a placeholder, not a secret)
OTP = "REDACTED-OTP"


CodeSource = Callable[[OfflineScrape], Awaitable[str]]
"""Where a one-time code comes from when the bank asks for one (given the scrape that ended
``two_factor_required``): a prompt, the sandbox's admin API."""


async def record(
    bank: str | type[BasicScraper],
    *,
    login: str,
    password: str,
    base_url: str | None = None,
    otp: CodeSource | None = None,
    today: date | None = None,
    http_config: HttpConfig | None = None,
    redactor: Redactor | None = None,
    policy: IncrementalPolicy | None = None,
    observers: Iterable[Observer] = (),
) -> tuple[OfflineScrape, Recording]:
    """Scrape ``bank`` live once (no database) and record every exchange. When the bank asks
    for a one-time code and ``otp`` is given, the code it returns is sent in a second run with
    the session the first one left, as the launcher does. The recording comes back redacted:
    ``login``, ``password`` and the code by their placeholders, the rest by ``redactor``'s
    rules with the scraper's :attr:`~scrapeflow.banking.BasicScraper.secret_fields`.
    ``observers``: also told of each exchange (a request log)."""
    scraper_cls = get_scraper(bank) if isinstance(bank, str) else bank
    recorder = Recorder()
    day = today or date.today()
    policy = policy or IncrementalPolicy()
    code: str | None = None
    async with HttpClient(http_config or HttpConfig()) as http:
        http.observers.extend([*observers, recorder])
        run = functools.partial(
            scrape_offline,
            scraper_cls,
            login=login,
            password=password,
            base_url=base_url,
            today=day,
            http=http,
            policy=policy,
        )
        scrape = await run()
        if scrape.result is ResultCode.TWO_FACTOR_REQUIRED and otp is not None:
            code = await otp(scrape)
            scrape = await run(otp=code, state=scrape.state)
    rules = redactor or Redactor()
    known = {"LOGIN": login, "PASSWORD": password, **({"OTP": code} if code else {})}
    rules = Redactor(
        known={**known, **rules.known},
        fields=[*rules.fields, *scraper_cls.secret_fields],
        values=rules.values,
        patterns=rules.patterns,
        ibans=rules.ibans,
    )
    meta = {
        "bank": scraper_cls.bank,
        "base_url": base_url or scraper_cls.default_url,
        "today": day.isoformat(),
        "otp": code is not None,
        "initial_days": policy.initial_days,
        "result": scrape.result.value,
    }
    return scrape, recorder.recording(meta).redacted(rules)


async def replay(
    recording: str | os.PathLike[str] | Recording,
    *,
    bank: str | type[BasicScraper] | None = None,
    golden: str | os.PathLike[str] | None = None,
    update_golden: bool | None = None,
    volatile: Iterable[str] = VOLATILE_FIELDS,
    policy: IncrementalPolicy | None = None,
) -> OfflineScrape:
    """Run the scraper against ``recording`` offline, as it ran when recorded (a second run
    with the code when a one-time code was asked for), and return what it read.

    ``bank``: the scraper (default: the bank the recording names). ``golden``: compare with
    this file (``update_golden``, or ``SCRAPEFLOW_UPDATE_GOLDEN=1``: write it instead). Raises
    :class:`~scrapeflow.errors.NotRecorded` for the first request the recording lacks, even
    when the scraper caught it, and :class:`~scrapeflow.errors.GoldenMismatch`.
    """
    name = "the recording"
    if not isinstance(recording, Recording):
        name = Path(recording).name
        recording = Recording.load(recording)
    meta = recording.meta
    scraper_cls = bank if isinstance(bank, type) else get_scraper(bank or str(meta.get("bank")))
    wire = ReplayWire(recording, volatile=volatile, name=name)
    # No waits: the recording answers at once, whatever the bank's pace or Retry-After was.
    hosts = {_slot(exchange.url): HostPolicy(adaptive=False) for exchange in recording}
    config = HttpConfig(retry=RetryPolicy(backoff=0, retry_after_max=0), hosts=hosts)
    today = meta.get("today")
    if policy is None and "initial_days" in meta:
        policy = IncrementalPolicy(initial_days=int(meta["initial_days"]))
    async with HttpClient(config, wire=wire) as http:
        run = functools.partial(
            scrape_offline,
            scraper_cls,
            login=LOGIN,
            password=PASSWORD,
            base_url=str(meta.get("base_url") or "") or None,
            today=date.fromisoformat(today) if today else None,
            http=http,
            policy=policy,
        )
        scrape = await run()
        if scrape.result is ResultCode.TWO_FACTOR_REQUIRED and meta.get("otp"):
            scrape = await run(otp=OTP, state=scrape.state)
    if wire.missing is not None:
        raise wire.missing
    if golden is not None:
        if update_golden is None:
            update_golden = os.environ.get(UPDATE_ENV, "") not in ("", "0")
        check_golden(scrape, golden, update=update_golden)
    return scrape


def _slot(url: str) -> str:
    import yarl

    parsed = yarl.URL(url)
    return f"{parsed.host}:{parsed.port}"

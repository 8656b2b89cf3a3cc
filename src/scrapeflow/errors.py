"""Every error scrapeflow raises on purpose derives from :class:`ScrapeflowError`.

The tree::

    ScrapeflowError
    ├── ConfigError (ValueError)            bad settings or arguments; the message names the culprit
    │   └── MissingSetting                  a mandatory value (argument or env var) is absent
    ├── InputError (ValueError)             bad user input: a URL list, a task set, a params dict
    │   └── InvalidAccount                  an account or movement a scraper read cannot be stored
    │       └── DuplicateMovement           one batch holds two movements with the same key
    ├── StatusError                         the status store cannot be used as asked
    │   ├── StatusCorrupt                   a status file is not valid JSON or not a status object
    │   ├── TaskNotFound (KeyError)         a key given without params has no status yet
    │   └── TaskConflict                    a key's stored params differ from the params given
    ├── ScrapeError (RuntimeError)          one task's scrape failed; recorded, the run goes on
    │   ├── HTTPStatusError                 the server answered with an unexpected status code
    │   ├── ValidationFailed                the response_callback refused the content
    │   ├── UndecodableBody (ValueError)    a body does not decode as text in its charset
    │   └── FetchError                      the HTTP layer gave up on a request (after retries)
    │       ├── FetchTimeout (TimeoutError)     no answer in time
    │       ├── ConnectionFailed (ConnectionError)  the connection failed or was dropped
    │       │   ├── NoProxyAvailable            every proxy is quarantined or bad: not sent
    │       │   └── EgressBlocked               the egress policy refuses the address: never dialled
    │       ├── RetryBudgetExhausted            the run's retry budget is spent
    │       └── SessionError                    the session is burnt: policy "retire it, retry"
    │           └── Banned                      the site banned this identity or IP
    │               └── CaptchaDetected         the site answered with a CAPTCHA
    ├── ProxyError                          proxy providers
    │   ├── ProxiesNotLoaded                get_one_proxy() before load()
    │   └── ProxyListUnavailable            a provider's list could not be fetched
    ├── JsError                             JavaScript run by scrapeflow.js failed (code, not input)
    ├── VaultError                          bank credentials cannot be encrypted or decrypted
    ├── BankingError                        bank aggregation (``scrapeflow.banking``)
    │   ├── AccessFailed                    one access's scrape ended with a result code
    │   ├── RefreshInProgress               the customer is already being refreshed
    │   ├── ResultsNotStored                a refresh could not store what it read: run it again
    │   ├── SessionExpired                  the bank ended the session: log in again, go on
    │   ├── UnknownScraper (LookupError)    no scraper is registered under that bank code
    │   ├── NotRecorded                     a replayed scraper sent a request its recording lacks
    │   └── GoldenMismatch (AssertionError) what a replayed scraper read is not its golden file
    ├── StorageError                        the blob store cannot be used as asked
    │   ├── StoreUnavailable                no such bucket, access denied, endpoint down
    │   ├── ObjectNotFound (KeyError)       nothing stored under that name (content, fetch log)
    │   ├── FetchInProgress                 another live run holds this shard of the fetch
    │   └── StorageCorrupt                  a stored object is not what it should be (bad log line)
    ├── SandboxAdminError                   the sandbox's admin API refused a call or did not answer
    ├── JobError                            the job machinery (``scrapeflow.jobs``)
    │   ├── UnknownJobKind (InputError)     no job kind is registered under that name
    │   ├── JobNotFound (KeyError)          no job has that id
    │   └── JobCancelled                    a job was cancelled (what it stored stays)
    ├── CrawlError                          a crawl (``scrapeflow.crawl``) cannot run as asked
    │   └── CrawlInProgress                 another process is running a crawl in that directory
    └── MissingExtra (ImportError)          an optional dependency is not installed

``ScrapeError`` also derives from :class:`RuntimeError` because the seed's contract is that an
executor raising ``RuntimeError`` fails its task without stopping the run.
"""

from __future__ import annotations

__all__ = [
    "AccessFailed",
    "BankingError",
    "Banned",
    "CaptchaDetected",
    "ConfigError",
    "ConnectionFailed",
    "CrawlError",
    "CrawlInProgress",
    "DuplicateMovement",
    "EgressBlocked",
    "FetchError",
    "FetchInProgress",
    "FetchTimeout",
    "GoldenMismatch",
    "HTTPStatusError",
    "InputError",
    "InvalidAccount",
    "JobCancelled",
    "JobError",
    "JobNotFound",
    "JsError",
    "MissingExtra",
    "MissingSetting",
    "NoProxyAvailable",
    "NotRecorded",
    "ObjectNotFound",
    "ProxiesNotLoaded",
    "ProxyError",
    "ProxyListUnavailable",
    "RefreshInProgress",
    "ResultsNotStored",
    "RetryBudgetExhausted",
    "SandboxAdminError",
    "ScrapeError",
    "ScrapeflowError",
    "SessionError",
    "SessionExpired",
    "StatusCorrupt",
    "StatusError",
    "StorageCorrupt",
    "StorageError",
    "StoreUnavailable",
    "TaskConflict",
    "TaskNotFound",
    "UndecodableBody",
    "UnknownJobKind",
    "UnknownScraper",
    "ValidationFailed",
    "VaultError",
]


class ScrapeflowError(Exception):
    """Root of every error scrapeflow raises on purpose."""


class ConfigError(ScrapeflowError, ValueError):
    """A setting or argument has a value scrapeflow cannot use."""


class MissingSetting(ConfigError):
    """A mandatory setting is absent; ``name`` is the argument or variable to set."""

    def __init__(self, name: str, hint: str = "") -> None:
        self.name = name
        super().__init__(f"missing setting {name}" + (f": {hint}" if hint else ""))


class InputError(ScrapeflowError, ValueError):
    """User input (a URL list, a task set) is malformed; the message says where."""


class StatusError(ScrapeflowError):
    """The status store cannot be used as asked."""


class StatusCorrupt(StatusError):
    """A status file exists but does not hold a status object. It is left untouched."""


class TaskNotFound(StatusError, KeyError):
    """A task was given by key only, but the store has no status (and so no params) for it."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class TaskConflict(StatusError):
    """A task's stored params differ from the params given now. Nothing is overwritten."""


class ScrapeError(ScrapeflowError, RuntimeError):
    """One task's scrape failed. Recorded in the task's status; the run goes on."""


class HTTPStatusError(ScrapeError):
    """The server answered with a status code the executor does not accept."""

    def __init__(self, status: int, url: str) -> None:
        self.status = status
        self.url = url
        super().__init__(f"HTTP response {status}")


class ValidationFailed(ScrapeError):
    """The content validation callback refused the response body."""


class UndecodableBody(ScrapeError, ValueError):
    """A response body is not text in its charset (the declared one, or the one the caller
    expects), or names a charset Python does not know. Nothing is replaced or guessed: text
    with replacement characters would be parsed and stored as if it were what the site said.

    ``url`` (without its query, which may carry tokens), ``encoding`` and ``position`` (the
    offset of the first bad byte, ``None`` for an unknown charset) say where.
    """

    def __init__(self, message: str, *, url: str, encoding: str, position: int | None) -> None:
        super().__init__(message)
        self.url = url
        self.encoding = encoding
        self.position = position


class FetchError(ScrapeError):
    """The HTTP layer gave up on a request; ``url`` and ``attempts`` say which and how hard."""

    def __init__(self, message: str, *, url: str = "", attempts: int = 0) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class FetchTimeout(FetchError, TimeoutError):
    """No complete answer within the request timeout."""


class ConnectionFailed(FetchError, ConnectionError):
    """The connection could not be made, or was dropped before a whole answer came."""


class NoProxyAvailable(ConnectionFailed):
    """A proxy provider is set but no proxy is usable now; the request is never sent directly."""


class EgressBlocked(ConnectionFailed):
    """The egress policy refuses the address a client-given URL leads to (loopback, a private
    range, link-local…): nothing was sent. ``address_class`` names the class ("loopback");
    the message never holds anything the peer sent."""

    def __init__(self, address_class: str, *, url: str = "", attempts: int = 0) -> None:
        super().__init__(
            f"blocked by egress policy: {address_class} address", url=url, attempts=attempts
        )
        self.address_class = address_class


class RetryBudgetExhausted(FetchError):
    """The client's retry budget for the run is spent; the request was not retried."""


class SessionError(FetchError):
    """The scraping session is burnt. Policy: retire it (new proxy, cookies, identity), retry."""


class Banned(SessionError):
    """The site banned this session's identity or IP (403, or a page ``is_ban`` recognised)."""


class CaptchaDetected(Banned):
    """The site answered with a CAPTCHA page (found by a content validator)."""


class ProxyError(ScrapeflowError):
    """Proxy providers: a list that cannot be had or used."""


class ProxiesNotLoaded(ProxyError, RuntimeError):
    """``get_one_proxy`` was called on a remote provider before ``await provider.load()``."""


class ProxyListUnavailable(ProxyError):
    """A proxy service did not return a usable list."""


class InvalidAccount(InputError):
    """An account or movement a scraper produced cannot be stored (bad IBAN, currency or
    number; a movement without a usable key)."""


class DuplicateMovement(InvalidAccount):
    """One batch of an account's movements holds two with the same key: storing it would keep
    one of them and silently drop the other. The whole batch is refused; ``key`` names it."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class VaultError(ScrapeflowError):
    """Bank credentials cannot be encrypted or decrypted; the message never holds a secret."""


class BankingError(ScrapeflowError):
    """Bank aggregation (``scrapeflow.banking``) cannot do what was asked."""


class AccessFailed(BankingError):
    """One access's scrape ended with ``code`` (a :class:`~scrapeflow.banking.ResultCode`).

    ``detail`` says what the scraper saw (a page, a message of the bank); it never holds a
    credential. Scrapers raise it; the launcher stores the code and the detail on the access.
    """

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else str(code))
        self.code = code
        self.detail = detail


class RefreshInProgress(BankingError):
    """The customer (or access) is already being refreshed; the watchdog frees a stuck one."""


class ResultsNotStored(BankingError):
    """A refresh (or one access's scrape) could not store what it read or how it ended (the
    database went away mid-run): what is stored is not what the banks said, so it must run
    again. Its ``__cause__`` is the first write that failed."""


class SessionExpired(BankingError):
    """The bank ended the session mid-scrape (a redirect to its login page, an expired token).

    Scrapers raise it from a page fetch; ``BasicScraper.in_session`` logs in again and retries.
    """


class UnknownScraper(BankingError, LookupError):
    """No scraper is registered (entry point ``scrapeflow.banks``) under that bank code."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotRecorded(BankingError):
    """A scraper played against a recording (``scrapeflow.banking.testing``) sent a request
    the recording does not hold: the message names it, and the recorded requests nearest."""


class GoldenMismatch(BankingError, AssertionError):
    """What a scraper read from a recording differs from its golden file; the message lists
    the differences (``--update-golden`` writes the file anew once they are right)."""


class JsError(ScrapeflowError):
    """JavaScript run through ``scrapeflow.js`` threw, or did not load."""


class StorageError(ScrapeflowError):
    """The blob store (``scrapeflow.storage``) cannot be used as asked. Never names credentials."""


class StoreUnavailable(StorageError):
    """The store cannot be reached or used (no such bucket, access denied, endpoint down)."""


class ObjectNotFound(StorageError, KeyError):
    """No object is stored under that name (a content checksum, a fetch log)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class FetchInProgress(StorageError):
    """Another run holds this shard of the fetch (its lock): the two would write twice."""


class StorageCorrupt(StorageError):
    """A stored object exists but is not what it should be (a fetch log line that is not JSON)."""


class SandboxAdminError(ScrapeflowError):
    """The sandbox's admin API (``/__admin/...``) answered other than 200, or not at all.

    ``site``, ``method``, ``path`` (with its query) and ``status`` (``None`` when no answer came)
    say which call; ``detail`` is the site's own reason. Never holds the admin token.
    """

    def __init__(
        self, message: str, *, site: str, method: str, path: str, status: int | None, detail: str
    ) -> None:
        super().__init__(message)
        self.site = site
        self.method = method
        self.path = path
        self.status = status
        self.detail = detail


class JobError(ScrapeflowError):
    """The job machinery (``scrapeflow.jobs``) cannot do what was asked."""


class UnknownJobKind(JobError, InputError):
    """No job kind is registered under that name (kinds are chosen by name, never by path)."""


class JobNotFound(JobError, KeyError):
    """No job has that id."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class JobCancelled(JobError):
    """A job was cancelled while it ran; what it had stored stays."""


class CrawlError(ScrapeflowError):
    """A crawl cannot run as asked."""


class CrawlInProgress(CrawlError):
    """Another process is running a crawl in the same directory: two at once would both
    fetch and export the same pages."""


class MissingExtra(ScrapeflowError, ImportError):
    """An optional dependency is needed; the message gives the pip command that installs it."""

    def __init__(self, feature: str, extra: str) -> None:
        super().__init__(
            f"{feature} needs the '{extra}' extra: pip install 'scrapeflow[{extra}]' "
            f"(in a checkout: pip install -e '.[{extra}]')"
        )

"""Why an attempt failed, and what a request ends with: the judgement of an answer (a ban, a
status to retry, a CAPTCHA), the counts, the final error; and the scrubbing that keeps
credentials and a peer's words out of errors and logs."""

from __future__ import annotations

from typing import Any

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from scrapeflow._util.redact import redact
from scrapeflow.errors import Banned, CaptchaDetected, ConnectionFailed, FetchError, FetchTimeout
from scrapeflow.http._failures import failure_class
from scrapeflow.http._response import BanCheck, Response, Validator

__all__ = [
    "Outcome",
    "count_failure",
    "describe",
    "error_text",
    "final_error",
    "judge",
    "never_sent",
    "proxy_refused_login",
    "without_credentials",
]

_THROTTLE_STATUSES = frozenset({429, 503})
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def never_sent(outcome: Outcome) -> bool:
    """Whether the failed attempt cannot have reached the server: safe to send again, even a
    POST. No connection could be made, or nobody read it (kind ``stale``, its resends spent)."""
    return isinstance(outcome.error, aiohttp.ClientConnectorError) or outcome.unread


class Outcome:
    """Why an attempt did not succeed, for the retry decision."""

    __slots__ = ("error", "generation", "kind", "proxy", "response", "retry_after", "unread")

    def __init__(
        self,
        kind: str,
        *,
        response: Response | None = None,
        error: BaseException | None = None,
        retry_after: float | None = None,
        unread: bool = False,
    ) -> None:
        self.kind = kind
        self.response = response
        self.error = error
        self.retry_after = retry_after
        self.unread = unread
        """Nobody read the request (:func:`scrapeflow.http._stale.stale`)."""
        self.proxy: str | None = None  # the label of the proxy it went through
        self.generation = 0  # of the session it was sent with


def judge(
    response: Response,
    validate: Validator | None,
    retry_statuses: frozenset[int],
    *,
    ban_statuses: frozenset[int],
    is_ban: BanCheck | None,
) -> Response | Outcome:
    """``response`` when it is what was asked for, else why not: a ban, a status to retry
    (a throttle with its ``Retry-After``), a page the validator refused (a CAPTCHA)."""
    status = response.status
    if status in ban_statuses or (is_ban and is_ban(response)):
        return Outcome("ban", response=response)
    if status in retry_statuses:
        retry_after = _retry_after(response)
        kind = "throttle" if status in _THROTTLE_STATUSES else "status"
        return Outcome(kind, response=response, retry_after=retry_after)
    if validate is not None and 200 <= status < 300:
        try:
            validate(response.body)
        except Exception as exc:
            return Outcome("captcha", response=response, error=exc)
    return response


def count_failure(outcome: Outcome, *stats: Any) -> None:
    """Count a failed attempt in each of ``stats`` (a host's, a proxy's) by its kind."""
    for s in stats:
        if s is None:
            continue
        if outcome.kind == "ban":
            s.bans += 1
        elif outcome.kind == "captcha":
            s.captchas += 1
        elif outcome.kind == "throttle":
            s.throttled += 1
        elif outcome.kind == "stale":
            s.resent += 1
        else:
            s.errors[outcome.kind] += 1


def final_error(outcome: Outcome, url: str, attempts: int, *, timeout: float) -> FetchError:
    """The error a request ends with after its last failed attempt, its cause the attempt's
    own error (a validator's, say)."""
    error = _final_error(outcome, url, attempts, timeout=timeout)
    error.__cause__ = outcome.error  # e.g. the validator's own error, for the caller
    return error


def _final_error(outcome: Outcome, url: str, attempts: int, *, timeout: float) -> FetchError:
    shown = redact(url)
    # A fixed phrase, never the error's text: aiohttp's quotes what the peer sent.
    detail = "" if outcome.error is None else f": {_phrase(outcome.error)}"
    if outcome.kind == "captcha":
        return CaptchaDetected(
            f"CAPTCHA after {attempts} attempt(s){detail}", url=shown, attempts=attempts
        )
    if outcome.kind == "ban":
        status = outcome.response.status if outcome.response else "?"
        return Banned(
            f"banned (HTTP {status}) after {attempts} attempt(s)", url=shown, attempts=attempts
        )
    if outcome.kind == "timeout":
        return FetchTimeout(
            f"no answer in {timeout:g} s after {attempts} attempt(s)",
            url=shown,
            attempts=attempts,
        )
    return ConnectionFailed(
        f"{outcome.kind} failure after {attempts} attempt(s){detail}",
        url=shown,
        attempts=attempts,
    )


def proxy_refused_login(status: int, headers: CIMultiDictProxy[str]) -> bool:
    """Whether an answer through a proxy is the proxy refusing our credentials, not the site.

    The standard refusal is a 407 with a ``Proxy-Authenticate`` challenge. tinyproxy answers a
    wrong BasicAuth login with a 401 of its own instead (``Server: tinyproxy/...``, and no
    ``Via``: an answer a proxy relays from the site carries the proxy's ``Via``). Taken for the
    site's 401, it would fail the task as if the site refused us, and never try another proxy.
    """
    if status == 407 or "Proxy-Authenticate" in headers:
        return True
    return (
        status == 401
        and "Via" not in headers
        and headers.get("Server", "").lower().startswith("tinyproxy/")
    )


def error_text(error: BaseException) -> str:
    """An error for a log line: its type and message, credentials scrubbed. Not its ``repr``:
    aiohttp's carries the request's headers, ``Proxy-Authorization`` among them."""
    return redact(f"{type(error).__name__}: {error}")


def without_credentials(info: aiohttp.RequestInfo) -> aiohttp.RequestInfo:
    """``info`` without the headers that carry credentials, to travel inside an error."""
    headers = CIMultiDict(
        (k, v) for k, v in info.headers.items() if k.lower() not in _CREDENTIAL_HEADERS
    )
    return aiohttp.RequestInfo(info.url, info.method, CIMultiDictProxy(headers), info.real_url)


def describe(outcome: Outcome) -> str:
    if outcome.response is not None:
        return f"{outcome.kind}, HTTP {outcome.response.status}"
    return f"{outcome.kind}: {_phrase(outcome.error)}" if outcome.error else outcome.kind


def _phrase(error: BaseException) -> str:
    """What an error may say of a failure: a validator's own words (our caller's code), else
    the transport failure's fixed class."""
    if isinstance(error, aiohttp.ClientError | OSError | TimeoutError):
        return failure_class(error)
    return redact(str(error))


def _retry_after(response: Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from rate limiters; the backoff applies

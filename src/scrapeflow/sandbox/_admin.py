"""One client for the sandbox's admin API: ``/__admin/...`` on every site but the plain one.

Every site of a sandbox answers its admin routes behind the sandbox's admin token (see
``_site``, ``banks/_base``, ``banks/_legacybank``, ``_feed`` and docs/sandbox.md §5).
:class:`SandboxAdmin` calls them with one aiohttp session and gives typed answers::

    >>> from datetime import date, timedelta
    >>> from scrapeflow.sandbox import SandboxAdmin
    >>> async with SandboxAdmin.from_manifest_file("sandbox.json") as admin:  # doctest: +SKIP
    ...     login = await admin.customer("legacybank", 2)
    ...     await admin.advance(timedelta(days=3))  # the clock all sites share
    ...     truth = await admin.truth("legacybank", login["username"], since=date(2026, 3, 1))

A call the site refuses (any status but 200), or one that gets no answer, raises
:class:`~scrapeflow.errors.SandboxAdminError` naming the site, method, path and status, and
never the token.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast
from urllib.parse import quote, urlencode, urlsplit

import aiohttp

from scrapeflow.errors import ConfigError, MissingSetting, SandboxAdminError
from scrapeflow.sandbox._guards import ADMIN_PREFIX
from scrapeflow.sandbox._hostility import Hostility
from scrapeflow.sandbox.banks._base import BankSettings

if TYPE_CHECKING:
    from scrapeflow.sandbox._sandbox import Sandbox

__all__ = [
    "AccountTruth",
    "BankTruth",
    "CustomerLogin",
    "FeedProfile",
    "MovementTruth",
    "SandboxAdmin",
]

T = TypeVar("T")

_NO_ADMIN_API = "plain"  # the one site without an admin API
_SHORTEST_REDACTED_TOKEN = 8  # a shorter token is a test's "t": redacting it would mangle text


class CustomerLogin(TypedDict):
    """A customer's login at one bank (``GET /__admin/customers/{n}``)."""

    bank: str
    customer: int
    username: str
    password: str
    locked: bool
    otp_required: bool


class AccountTruth(TypedDict):
    """One account in :class:`BankTruth`. ``balance`` is a decimal string; ``iban`` is
    ``None`` for cards; ``kind`` is ``checking``, ``savings`` or ``card``."""

    id: str
    contract: str
    contract_name: str
    iban: str | None
    number: str
    currency: str
    kind: str
    alias: str
    balance: str


class MovementTruth(TypedDict):
    """One movement in :class:`BankTruth`: dates ISO, amounts decimal strings, ``ref`` stable
    from pending to booked, ``balance_after`` ``None`` while pending."""

    ref: str
    operation_date: str
    value_date: str
    amount: str
    description: str
    pending: bool
    balance_after: str | None


class BankTruth(TypedDict):
    """What a login has at a bank at sandbox time ``at`` (``GET /__admin/truth/{username}``).

    ``movements`` maps each account id to its movements: booked ones oldest first, then pending.
    """

    bank: str
    customer: int
    username: str
    at: str
    accounts: list[AccountTruth]
    movements: dict[str, list[MovementTruth]]


class FeedProfile(TypedDict):
    """A feed profile's posts, newest first (``GET /__admin/profiles/{profile}``)."""

    profile: str
    profile_id: str
    count: int
    post_ids: list[str]


class SandboxAdmin:
    """An async client for the admin API of a sandbox's sites.

    ``sites`` maps site names (``feed``, ``formbank``, ``apibank``, ``legacybank``, ``plain``,
    or any name for a site served alone) to base URLs; ``token`` is the admin token. Build one
    from a running :class:`~scrapeflow.sandbox.Sandbox` (:meth:`from_sandbox`) or from the
    manifest ``scrapeflow sandbox --manifest`` writes (:meth:`from_manifest`,
    :meth:`from_manifest_file`).

    Use it as an async context manager: it opens one ``aiohttp.ClientSession`` and closes it
    on exit. Give ``session=`` to use a session of your own instead (it is left open).
    ``timeout`` bounds each call, in seconds.

    >>> async with SandboxAdmin.from_sandbox(sandbox) as admin:  # doctest: +SKIP
    ...     await admin.update_bank_settings("formbank", layout=2)
    ...     code = await admin.otp("legacybank", "L0000002")

    Methods take the site to call first. The clock is shared by every site, so :meth:`now` and
    :meth:`advance` pick one unless told which. Hostility, bans and stats belong to the site
    called; settings, customers, truth and one-time codes to a bank; profiles to the feed.
    """

    def __init__(
        self,
        sites: Mapping[str, str],
        token: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._sites = _checked_sites(sites, where="")
        if not isinstance(token, str) or not token.strip():
            raise ConfigError("the admin token must be a non-empty string")
        if not timeout > 0:
            raise ConfigError(f"timeout must be positive, got {timeout!r}")
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._owns_session = False

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_sandbox(
        cls,
        sandbox: Sandbox,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
    ) -> SandboxAdmin:
        """A client for a running :class:`~scrapeflow.sandbox.Sandbox` (entered, so it has URLs).

        >>> with Sandbox.in_thread(SandboxConfig(hostility="none")) as sandbox:  # doctest: +SKIP
        ...     async with SandboxAdmin.from_sandbox(sandbox) as admin:
        ...         print(await admin.now())
        """
        if not sandbox.urls:
            raise ConfigError("the sandbox is not running (enter it first: it has no URLs yet)")
        return cls(sandbox.urls, sandbox.admin_token, session=session, timeout=timeout)

    @classmethod
    def from_manifest(
        cls,
        manifest: Mapping[str, Any],
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
        source: str = "the sandbox manifest",
    ) -> SandboxAdmin:
        """A client from a sandbox manifest (its ``sites`` and ``admin_token``; the rest is
        ignored). ``source`` names the manifest in error messages.

        Raises :class:`~scrapeflow.errors.ConfigError` naming the field that is missing or
        wrong (:class:`~scrapeflow.errors.MissingSetting` when absent).

        >>> SandboxAdmin.from_manifest({"sites": {"feed": "http://127.0.0.1:8001"},
        ...                             "admin_token": "s3cret-token"})
        SandboxAdmin(sites=['feed'])
        """
        if not isinstance(manifest, Mapping):
            raise ConfigError(f"{source} must be a JSON object")
        for name in ("sites", "admin_token"):
            if name not in manifest:
                raise MissingSetting(name, f"{source} has no {name!r}")
        token = manifest["admin_token"]
        if not isinstance(token, str) or not token.strip():
            raise ConfigError(f"{source}: admin_token must be a non-empty string")
        sites = _checked_sites(manifest["sites"], where=f"{source}: ")
        return cls(sites, token, session=session, timeout=timeout)

    @classmethod
    def from_manifest_file(
        cls,
        path: str | os.PathLike[str],
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
    ) -> SandboxAdmin:
        """A client from the JSON file ``scrapeflow sandbox --manifest PATH`` wrote.

        >>> admin = SandboxAdmin.from_manifest_file("sandbox.json")  # doctest: +SKIP
        """
        source = f"the sandbox manifest {os.fspath(path)}"
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from None
        try:
            manifest = json.loads(text)
        except ValueError as exc:
            # Only the position: the file holds the admin token, never echo its content.
            where = getattr(exc, "lineno", None)
            at = f" (line {where})" if where else ""
            raise ConfigError(f"{source} is not JSON{at}") from None
        return cls.from_manifest(manifest, session=session, timeout=timeout, source=source)

    @property
    def sites(self) -> Mapping[str, str]:
        """Site name to base URL (a copy)."""
        return dict(self._sites)

    def __repr__(self) -> str:
        return f"SandboxAdmin(sites={sorted(self._sites)!r})"

    # -- the session --------------------------------------------------------------------------

    async def __aenter__(self) -> SandboxAdmin:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
            self._owns_session = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session this client opened (a session given to it is left open)."""
        if self._owns_session and self._session is not None:
            session, self._session, self._owns_session = self._session, None, False
            await session.close()

    # -- every site but plain: health, clock, hostility, bans, stats ---------------------------

    async def health(self, site: str) -> str:
        """The name the site gives itself (``GET /__admin/health``)."""
        path = f"{ADMIN_PREFIX}/health"
        return self._field(site, "GET", path, await self.request(site, "GET", path), "site")

    async def now(self, *, site: str | None = None) -> datetime:
        """Sandbox time, UTC (``GET /__admin/clock``). Every site shares one clock.

        >>> (await admin.now()).date()  # doctest: +SKIP
        datetime.date(2026, 3, 2)
        """
        site = site or self._clock_site()
        answer = await self.request(site, "GET", f"{ADMIN_PREFIX}/clock")
        return self._time(answer, site, "GET", f"{ADMIN_PREFIX}/clock")

    async def advance(self, delta: timedelta, *, site: str | None = None) -> datetime:
        """Move sandbox time forward by ``delta`` at every site (``POST /__admin/clock``);
        the new time. A negative ``delta`` is refused (400): the clock only moves forward.

        >>> await admin.advance(timedelta(days=3))  # doctest: +SKIP
        datetime.datetime(2026, 3, 5, 9, 0, tzinfo=datetime.timezone.utc)
        """
        site = site or self._clock_site()
        path = f"{ADMIN_PREFIX}/clock"
        answer = await self.request(site, "POST", path, json={"seconds": delta.total_seconds()})
        return self._time(answer, site, "POST", path)

    async def hostility(self, site: str) -> Hostility:
        """The site's defences now (``GET /__admin/hostility``)."""
        path = f"{ADMIN_PREFIX}/hostility"
        return self._parse(site, "GET", path, Hostility, await self.request(site, "GET", path))

    async def set_hostility(
        self, site: str, *, profile: str | None = None, **switches: float | bool | str
    ) -> Hostility:
        """Change the site's defences (``POST /__admin/hostility``): start from ``profile``
        (``none``, ``realistic``, ``hostile``) if given, else from the current switches, and
        set ``switches`` on top. The new defences; 400 for an unknown profile or switch.

        >>> await admin.set_hostility("feed", profile="hostile", captcha_rate=0)  # doctest: +SKIP
        """
        body: dict[str, Any] = dict(switches)
        if profile is not None:
            body["profile"] = profile
        path = f"{ADMIN_PREFIX}/hostility"
        answer = await self.request(site, "POST", path, json=body)
        return self._parse(site, "POST", path, Hostility, answer)

    async def block(self, site: str, ip: str, *, seconds: float = 3600.0) -> None:
        """Ban ``ip`` at the site for ``seconds`` (``POST /__admin/block``)."""
        body = {"ip": ip, "seconds": seconds}
        await self.request(site, "POST", f"{ADMIN_PREFIX}/block", json=body)

    async def unblock_all(self, site: str) -> None:
        """Lift every ban at the site and forget its rate-limit state
        (``DELETE /__admin/block``)."""
        await self.request(site, "DELETE", f"{ADMIN_PREFIX}/block")

    async def stats(self, site: str) -> Counter[str]:
        """What the site's guard counted (``GET /__admin/stats``): ``requests``, ``banned``,
        ``header_blocks``, ``rate_limited``, ``bans``, ``dropped``, ``errors``, ``slow``,
        ``captchas``. A name not counted yet reads 0."""
        path = f"{ADMIN_PREFIX}/stats"
        answer = await self.request(site, "GET", path)
        try:
            return Counter({str(name): int(count) for name, count in answer.items()})
        except (TypeError, ValueError) as exc:
            raise self._error(site, "GET", path, 200, f"unexpected answer ({exc})") from None

    # -- banks: customers, ground truth, one-time codes, settings -----------------------------

    async def customer(self, bank: str, n: int) -> CustomerLogin:
        """Customer ``n``'s login at ``bank`` (``GET /__admin/customers/{n}``); 404 outside
        1..customers.

        >>> login = await admin.customer("formbank", 2)  # doctest: +SKIP
        >>> login["username"], login["otp_required"]  # doctest: +SKIP
        ('00000002W', False)
        """
        return cast(CustomerLogin, await self.request(bank, "GET", f"{ADMIN_PREFIX}/customers/{n}"))

    async def truth(self, bank: str, username: str, *, since: date | None = None) -> BankTruth:
        """Everything ``username`` has at ``bank`` at sandbox time now (``GET
        /__admin/truth/{username}``); ``since`` keeps the movements operated on or after that
        day. 404 for an unknown user."""
        path = f"{ADMIN_PREFIX}/truth/{quote(username, safe='')}"
        params = {"since": since.isoformat()} if since is not None else None
        return cast(BankTruth, await self.request(bank, "GET", path, params=params))

    async def otp(self, bank: str, username: str) -> str:
        """The one-time code ``bank`` last "sent by SMS" to ``username`` and still live
        (``GET /__admin/otp/{username}``, the legacy bank only). 404 when no code is pending.

        >>> code = await admin.otp("legacybank", "L0000002")  # doctest: +SKIP
        """
        path = f"{ADMIN_PREFIX}/otp/{quote(username, safe='')}"
        return self._field(bank, "GET", path, await self.request(bank, "GET", path), "code")

    async def approvals(self, bank: str = "neobank") -> list[dict[str, Any]]:
        """The push approvals waiting for an answer (``GET /__admin/approvals``): each with its
        ``id``, ``username``, ``age_seconds`` and ``expires_in``."""
        path = f"{ADMIN_PREFIX}/approvals"
        waiting = (await self.request(bank, "GET", path)).get("approvals")
        if not isinstance(waiting, list):
            raise self._error(bank, "GET", path, 200, "no list of approvals")
        return waiting

    async def decide(self, username: str, *, approve: bool, bank: str = "neobank") -> str:
        """Answer ``username``'s latest waiting push as the customer would: approve or reject
        it (``POST /__admin/approvals/{username}``); 404 when none waits. The new status.

        >>> await admin.decide("neo000002", approve=False)  # doctest: +SKIP
        """
        path = f"{ADMIN_PREFIX}/approvals/{quote(username, safe='')}"
        body = {"decision": "approve" if approve else "reject"}
        answer = await self.request(bank, "POST", path, json=body)
        return self._field(bank, "POST", path, answer, "status")

    async def approval_settings(self, bank: str = "neobank", **changes: float) -> dict[str, float]:
        """The simulated customer's behaviour, changed by ``changes`` when given
        (``/__admin/approval``): ``approve_after_seconds`` (below 0: only :meth:`decide`
        answers), ``ttl_seconds``, ``poll_interval_seconds``."""
        path = f"{ADMIN_PREFIX}/approval"
        method = "POST" if changes else "GET"
        answer = await self.request(bank, method, path, json=dict(changes) if changes else None)
        if not isinstance(answer, dict):
            raise self._error(bank, method, path, 200, "not an object")
        return {str(k): float(v) for k, v in answer.items()}

    async def bank_settings(self, bank: str) -> BankSettings:
        """The bank's behaviour switches (``GET /__admin/settings``)."""
        path = f"{ADMIN_PREFIX}/settings"
        return self._parse(bank, "GET", path, BankSettings, await self.request(bank, "GET", path))

    async def update_bank_settings(self, bank: str, **changes: float) -> BankSettings:
        """Change some of the bank's switches, all or none (``POST /__admin/settings``); the
        new settings. 400 for an unknown name or a bad value.

        >>> await admin.update_bank_settings("legacybank", maintenance_rate=1.0)  # doctest: +SKIP
        """
        path = f"{ADMIN_PREFIX}/settings"
        answer = await self.request(bank, "POST", path, json=dict(changes))
        return self._parse(bank, "POST", path, BankSettings, answer)

    # -- the feed -------------------------------------------------------------------------------

    async def profile(self, site: str, profile: str) -> FeedProfile:
        """A feed profile's post ids, newest first, and its count (``GET
        /__admin/profiles/{profile}``); 404 for an unknown profile."""
        path = f"{ADMIN_PREFIX}/profiles/{quote(profile, safe='')}"
        return cast(FeedProfile, await self.request(site, "GET", path))

    # -- any admin route ------------------------------------------------------------------------

    async def request(
        self,
        site: str,
        method: str,
        path: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Call any admin route of ``site`` and return its answer, a JSON object (the typed
        methods above all go through here). ``path`` starts with ``/__admin/``.

        >>> await admin.request("feed", "GET", "/__admin/stats")  # doctest: +SKIP
        {'requests': 12}
        """
        if not path.startswith(f"{ADMIN_PREFIX}/"):
            raise ConfigError(f"an admin path starts with {ADMIN_PREFIX}/, got {path!r}")
        base = self._url(site)
        session = self._open_session()
        shown = f"{path}?{urlencode(params)}" if params else path
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with session.request(
                method,
                base + path,
                json=None if json is None else dict(json),
                params=None if params is None else dict(params),
                headers=headers,
                timeout=self._timeout,
            ) as response:
                status = response.status
                text = await response.text()
        except TimeoutError:
            detail = f"nothing within {self._timeout.total:g} s"
            raise self._error(site, method, shown, None, detail) from None
        except aiohttp.ClientError as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise self._error(site, method, shown, None, detail) from None
        if status != 200:
            raise self._error(site, method, shown, status, _reason(text))
        try:
            answer = _json_loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._error(site, method, shown, status, "the answer is not a JSON object")
        return answer

    # -- internals ----------------------------------------------------------------------------

    def _url(self, site: str) -> str:
        try:
            return self._sites[site]
        except KeyError:
            known = ", ".join(sorted(self._sites))
            raise ConfigError(f"no site {site!r} in this sandbox (sites: {known})") from None

    def _clock_site(self) -> str:
        return next(name for name in self._sites if name != _NO_ADMIN_API)

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            raise RuntimeError(
                "SandboxAdmin is not open: use `async with SandboxAdmin(...) as admin`, "
                "or give it an open session="
            )
        return self._session

    def _error(
        self, site: str, method: str, path: str, status: int | None, detail: str
    ) -> SandboxAdminError:
        detail = self._redacted(detail)
        answered = "got no answer" if status is None else f"answered {status}"
        message = f"sandbox admin API: {method} {path} on {site} {answered}: {detail}"
        return SandboxAdminError(
            message, site=site, method=method, path=path, status=status, detail=detail
        )

    def _redacted(self, text: str) -> str:
        if len(self._token) >= _SHORTEST_REDACTED_TOKEN and self._token in text:
            return text.replace(self._token, "<admin token>")
        return text

    def _field(self, site: str, method: str, path: str, answer: dict[str, Any], key: str) -> str:
        value = answer.get(key)
        if not isinstance(value, str):
            raise self._error(site, method, path, 200, f"no {key!r} in the answer")
        return value

    def _time(self, answer: dict[str, Any], site: str, method: str, path: str) -> datetime:
        try:
            return datetime.fromisoformat(answer["now"])
        except (KeyError, TypeError, ValueError):
            raise self._error(site, method, path, 200, "no time in the answer") from None

    def _parse(
        self, site: str, method: str, path: str, make: Callable[..., T], answer: dict[str, Any]
    ) -> T:
        """``make(**answer)``, or a :class:`SandboxAdminError` if the answer does not fit."""
        try:
            return make(**answer)
        except (TypeError, ValueError) as exc:
            raise self._error(site, method, path, 200, f"unexpected answer ({exc})") from None


def _checked_sites(sites: Any, *, where: str) -> dict[str, str]:
    """``sites`` as a dict of name to base URL (no trailing slash), or a ConfigError."""
    if not isinstance(sites, Mapping) or not sites:
        raise ConfigError(f"{where}sites must be a non-empty object of site name to URL")
    checked: dict[str, str] = {}
    for name, url in sites.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}sites must be named by non-empty strings, got {name!r}")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            shown = repr(url) if len(repr(url)) <= 80 else repr(url)[:77] + "..."
            raise ConfigError(f"{where}sites.{name} must be an http(s) URL, got {shown}")
        checked[name] = url.rstrip("/")
    if set(checked) <= {_NO_ADMIN_API}:
        raise ConfigError(f"{where}sites names no site with an admin API (all have one but plain)")
    return checked


def _reason(text: str) -> str:
    """The site's reason for a refusal: its JSON ``error``, else the start of the body."""
    try:
        body = _json_loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def _json_loads(text: str) -> Any:
    return json.loads(text)

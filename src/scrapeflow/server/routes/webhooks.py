"""``/v1/webhooks``: register a URL for this key's events, list, look, delete, and read the
delivery log. A webhook belongs to the key that made it: another key gets 404 for it (an admin
key over every customer sees them all; an admin key restricted to customers only its own, like
any restricted key, since another key's webhook may carry other customers' events). The
signing secret is shown once, in the answer to the create."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from yarl import URL

from scrapeflow.server._deps import State, caller_with
from scrapeflow.server._keys import ApiKey, Scope
from scrapeflow.server._problems import Problem
from scrapeflow.server._webhooks import (
    MAX_URL,
    Delivery,
    DeliveryState,
    Webhook,
    describe_kinds,
    unknown_filters,
)

__all__ = [
    "DeliveryOut",
    "DeliveryPage",
    "WebhookCreated",
    "WebhookIn",
    "WebhookOut",
    "create_webhook",
    "delete_webhook",
    "get_webhook",
    "list_deliveries",
    "list_webhooks",
    "router",
]

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
Reader = Annotated[ApiKey, Depends(caller_with(Scope.READ))]
_MAX_PER_KEY = 20
"""Webhooks one key may have: enough for any receiver set-up, few enough to send to all."""


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(min_length=1, max_length=MAX_URL)]
    """Where to POST the events: an absolute ``http://`` or ``https://`` URL."""
    events: Annotated[list[Annotated[str, Field(max_length=64)]] | None, Field(min_length=1)] = None
    """Event kinds (``job.succeeded``) or prefixes (``bank.``, ``job.``); left out: every kind."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if any(c.isspace() for c in value) or not value.isprintable():
            raise ValueError("a URL has no spaces or control characters")
        try:
            url = URL(value)
            host, port = url.host, url.port
        except (ValueError, TypeError):  # UnicodeError too: a host IDNA cannot decode
            raise ValueError("not a URL") from None
        if url.scheme not in ("http", "https") or not host or not url.is_absolute():
            raise ValueError("must be an absolute http:// or https:// URL")
        if port is not None and not 1 <= port <= 65_535:
            raise ValueError("the URL's port is not a number from 1 to 65535")
        return value


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str] | None
    """The kinds asked for; null: every kind."""
    key_id: str
    """The API key the webhook belongs to (the id part of ``sf_<id>_…``)."""
    created_at: datetime

    @classmethod
    def of(cls, hook: Webhook) -> WebhookOut:
        return cls(
            id=hook.id,
            url=hook.url,
            events=list(hook.events) or None,
            key_id=hook.key_id,
            created_at=hook.created_at,
        )


class WebhookCreated(WebhookOut):
    secret: str
    """The signing secret (``whsec_…``): shown in this answer only. Keep it to check the
    ``Scrapeflow-Signature`` of each delivery."""


class DeliveryOut(BaseModel):
    id: str
    """The idempotency id the receiver got (``Scrapeflow-Event-Id``), the same on each try."""
    event_id: int
    kind: str
    state: str
    """``pending`` (to be tried again at ``next_attempt_at``), ``delivered`` or ``failed``."""
    attempts: int
    last_status: int | None
    """The receiver's HTTP status at the last attempt; null when it gave none."""
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    event_at: datetime

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryOut:
        return cls(
            id=delivery.id,
            event_id=delivery.event_id,
            kind=delivery.kind,
            state=delivery.state.value,
            attempts=delivery.attempts,
            last_status=delivery.last_status,
            last_error=delivery.last_error,
            next_attempt_at=delivery.next_attempt_at,
            delivered_at=delivery.delivered_at,
            event_at=delivery.event_at,
        )


class DeliveryPage(BaseModel):
    deliveries: list[DeliveryOut]
    next_before: int | None
    """Pass as ``before`` for the next (older) page; null at the end."""


async def _owned(webhook_id: str, state: State, key: Reader) -> Webhook:
    """A dependency: the path's webhook, which the caller's key must own (or be an admin over
    every customer)."""
    hook = await state.webhooks.get(webhook_id) if len(webhook_id) <= 32 else None
    if hook is None or (hook.key_id != key.id and not key.unrestricted_admin):
        # Someone else's webhook: not even its existence is told.
        raise Problem(404, "webhook-not-found", f"no webhook {webhook_id[:32]!r}")
    return hook


Owned = Annotated[Webhook, Depends(_owned)]


@router.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    responses={
        409: {
            "description": f"The key has {_MAX_PER_KEY} webhooks already.",
            "content": {
                "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
            },
        }
    },
)
async def create_webhook(
    body: WebhookIn, state: State, key: Reader, response: Response
) -> WebhookCreated:
    """Register a URL for this key's events (a key restricted to customers gets only theirs).
    The URL may not lead where the egress policy blocks (loopback, private ranges…: 422
    ``egress-blocked``). The answer holds the signing secret, shown this once."""
    from scrapeflow.banking import CredentialVault

    unknown = unknown_filters(body.events or ())
    if unknown:
        raise Problem(
            422,
            "unknown-event-kind",
            f"no event kind {unknown[0]!r} (kinds: {describe_kinds()})",
        )
    if len(await state.webhooks.of(key.id)) >= _MAX_PER_KEY:
        raise Problem(409, "too-many-webhooks", f"a key has at most {_MAX_PER_KEY} webhooks")
    # Where the receiver leads, in every spelling: 422 egress-blocked (each delivery is judged
    # again as it is dialled, so a name that moves inside later gets nothing either).
    await state.egress.check_url(body.url)
    vault = CredentialVault.from_settings(state.settings)
    hook, secret = await state.webhooks.create(
        key, body.url, list(dict.fromkeys(body.events or ())), vault
    )
    response.headers["Location"] = f"/v1/webhooks/{hook.id}"
    return WebhookCreated(**WebhookOut.of(hook).model_dump(), secret=secret)


@router.get("", response_model=list[WebhookOut])
async def list_webhooks(state: State, key: Reader) -> list[WebhookOut]:
    """This key's webhooks, oldest first (an admin key over every customer: every key's)."""
    everyone = key.unrestricted_admin
    return [WebhookOut.of(h) for h in await state.webhooks.of(None if everyone else key.id)]


@router.get("/{webhook_id}", response_model=WebhookOut)
async def get_webhook(hook: Owned) -> WebhookOut:
    """One webhook (never its secret)."""
    return WebhookOut.of(hook)


@router.delete("/{webhook_id}", status_code=204)
async def delete_webhook(hook: Owned, state: State) -> Response:
    """Remove the webhook and its delivery log; nothing more is sent to it."""
    await state.webhooks.delete(hook.id)
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=DeliveryPage)
async def list_deliveries(
    hook: Owned,
    state: State,
    delivery_state: Annotated[DeliveryState | None, Query(alias="state")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="from the page's next_before")
    ] = None,
) -> DeliveryPage:
    """The delivery log, newest first: per event, its state, attempts, the last status or
    error, and when the next attempt is due."""
    found = await state.webhooks.deliveries(
        hook.id, limit=limit + 1, before=before, state=delivery_state
    )
    page = found[:limit]
    return DeliveryPage(
        deliveries=[DeliveryOut.of(d) for d in page],
        next_before=page[-1].row if len(found) > limit and page else None,
    )

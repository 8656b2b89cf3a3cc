"""Items: what handlers give, made plain JSON, validated, then passed through the pipelines.

An item is a dict, a dataclass or a pydantic model. It is stored with its page (in the page's
status) and exported as JSON values: ``Decimal`` as text (never a float), dates and times in
ISO 8601, sets as lists. A pipeline is a function ``(item, response) -> item | None``, sync or
async: it returns the item (changed or not), or None to drop it. Pipelines run in the order
given; an exception in one fails the page like an exception in its handler.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from scrapeflow.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from scrapeflow.crawl._response import Response

__all__ = ["Item", "ItemFlow", "Pipeline", "plain_item"]

Item = dict[str, Any]
Pipeline = Callable[[Item, "Response"], Any]


def _json_value(value: object) -> object:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


def plain_item(item: object) -> Item:
    """``item`` as a dict of JSON values.

    >>> from decimal import Decimal
    >>> plain_item({"price": Decimal("9.90"), "tags": {"a"}})
    {'price': '9.90', 'tags': ['a']}
    """
    if not isinstance(item, dict):
        item = _json_value(item)
        if not isinstance(item, dict):
            raise TypeError(f"a handler gave a {type(item).__name__}")
    try:
        # orjson, as the page's status is saved with: what it refuses (an integer past 64
        # bits) fails the page here, not the save after the item was exported; NaN and
        # infinities become null in both.
        plain = orjson.loads(
            orjson.dumps(item, default=_json_value, option=orjson.OPT_NON_STR_KEYS)
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"an item is not JSON: {exc}") from None
    return plain  # type: ignore[no-any-return]


class ItemFlow:
    """Validation by ``model`` (a pydantic model, optional), then ``pipelines`` in order."""

    def __init__(
        self, pipelines: Sequence[Pipeline] = (), *, model: type[BaseModel] | None = None
    ) -> None:
        for pipeline in pipelines:
            if not callable(pipeline):
                raise InputError(f"a pipeline is a function (item, response), got {pipeline!r}")
        self.pipelines = list(pipelines)
        self.model = model
        self.dropped = 0
        """Items a pipeline dropped (returned None)."""
        self.invalid = 0
        """Items the model refused."""
        self.first_invalid: str | None = None

    async def process(self, items: list[object], response: Response) -> list[Item]:
        """The items that come out of validation and every pipeline, as plain dicts."""
        out = []
        for raw in items:
            item = plain_item(raw)
            if self.model is not None:
                validated = self._validate(self.model, item)
                if validated is None:
                    continue
                item = validated
            for pipeline in self.pipelines:
                result = pipeline(item, response)
                if inspect.isawaitable(result):
                    result = await result
                if result is None:
                    self.dropped += 1
                    break
                item = plain_item(result)
            else:
                out.append(item)
        return out

    def _validate(self, model: type[BaseModel], item: Item) -> Item | None:
        from pydantic import ValidationError

        try:
            return model.model_validate(item).model_dump(mode="json")
        except ValidationError as exc:
            self.invalid += 1
            if self.first_invalid is None:
                self.first_invalid = str(exc).splitlines()[0] + ": " + str(exc.errors()[0]["loc"])
            return None

"""Handlers by label: which function parses which kind of page.

A handler takes the :class:`~scrapeflow.crawl.Response` and gives items and requests any way
that reads naturally: ``yield`` them (a generator or an async generator), ``return`` one or a
list, or return nothing and call ``response.enqueue_links``. A yielded
:class:`~scrapeflow.crawl.Request` is crawled; anything else is an item.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from scrapeflow.errors import ConfigError

if TYPE_CHECKING:
    from scrapeflow.crawl._response import Response

__all__ = ["Handler", "NoHandler", "Router", "results_of"]

Handler = Callable[["Response"], Any]
H = TypeVar("H", bound=Handler)


class NoHandler(LookupError):
    """A request's label has no handler and the router has no default handler."""


class Router:
    """Handlers by request label, and a default handler for the rest.

    >>> router = Router()
    >>> @router.default_handler
    ... async def page(response):
    ...     yield {"title": response.css("title::text").get()}
    >>> @router.handler("detail")
    ... def detail(response):
    ...     return {"url": response.url}
    >>> router.labels
    ['detail']
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._default: Handler | None = None

    @property
    def labels(self) -> list[str]:
        return sorted(self._handlers)

    def default_handler(self, handler: H) -> H:
        """Decorator: the handler of requests with no label, or a label with no handler."""
        _check_callable(handler)
        self._default = handler
        return handler

    def handler(self, label: str) -> Callable[[H], H]:
        """Decorator: the handler of requests labelled ``label``."""
        if not isinstance(label, str) or not label:
            raise ConfigError(f"a handler's label is a non-empty string, got {label!r}")

        def register(handler: H) -> H:
            _check_callable(handler)
            if label in self._handlers:
                raise ConfigError(f"label {label!r} has a handler already")
            self._handlers[label] = handler
            return handler

        return register

    def route(self, label: str | None) -> Handler:
        """The handler for ``label``; :class:`NoHandler` when there is none."""
        handler = self._handlers.get(label) if label is not None else None
        handler = handler or self._default
        if handler is None:
            raise NoHandler(f"no handler for label {label!r} and no default handler")
        return handler

    @classmethod
    def of(cls, handlers: Router | Handler) -> Router:
        """A router as given, or one whose default handler is the function given."""
        if isinstance(handlers, Router):
            return handlers
        router = cls()
        router.default_handler(handlers)
        return router


def _check_callable(handler: object) -> None:
    if not callable(handler):
        raise ConfigError(f"a handler is a function taking the response, got {handler!r}")


async def results_of(handler: Handler, response: Response) -> list[Any]:
    """Everything ``handler`` gives for ``response``, in order: what it yields or returns."""
    out = handler(response)
    if inspect.isawaitable(out):
        out = await out
    if inspect.isasyncgen(out):
        return [x async for x in out]
    if out is None:
        return []
    if inspect.isgenerator(out) or isinstance(out, list | tuple):
        return list(out)
    return [out]

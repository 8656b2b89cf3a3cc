"""The customer book from the command line, as the API and the dashboard run it: customers
listed a page at a time (searched, filtered by outcome), renamed; an access disabled and
enabled again. Registered on ``scrapeflow bank`` by :mod:`scrapeflow.cli.bank`, whose
database helpers (:mod:`scrapeflow.cli._bankdb`) it shares."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from scrapeflow.cli._bankdb import customer_ids, on_bank_db, with_db
from scrapeflow.cli._common import input_errors, out, settings

__all__ = ["customers", "disable", "enable", "rename"]

_OUTCOMES = ("succeeded", "partial", "needs_action", "failed", "none")


def customers(
    ctx: typer.Context,
    search: Annotated[
        str, typer.Option("--search", help="A part of the id or the name, any case.")
    ] = "",
    outcome: Annotated[
        list[str] | None,
        typer.Option(
            help="Keep those whose last refresh ended so: succeeded, partial, needs_action, "
            "failed or none (repeat for several)."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Customers shown.", min=1, max=10_000)] = 50,
    after: Annotated[
        str | None, typer.Option(help="Start after this customer id (the next page).")
    ] = None,
) -> None:
    """List the customers by id, a page at a time, with their outcome and last refresh."""
    from scrapeflow.banking import Outcome, customer_page
    from scrapeflow.cli._common import fail

    wanted = []
    for name in outcome or ():
        if name not in _OUTCOMES:
            fail(f"--outcome: {name!r} is not one of {', '.join(_OUTCOMES)}")
        wanted.append(None if name == "none" else Outcome(name))
    config = settings(ctx)
    page = on_bank_db(
        config,
        with_db(
            config,
            lambda sessions: customer_page(
                sessions, limit=limit, after=after, search=search.strip(), outcomes=wanted
            ),
        ),
    )
    table = Table("customer", "name", "state", "outcome", "last refresh")
    for c in page.customers:
        table.add_row(
            escape(c.external_id),
            escape(c.name),
            c.state.value,
            c.outcome.value if c.outcome else "",
            c.last_refresh_at.isoformat(timespec="seconds") if c.last_refresh_at else "",
        )
    out.print(table)
    shown = f"{len(page.customers):,} of {page.total:,} customer(s)"
    if page.more:
        shown += f"; the next page: --after {page.customers[-1].external_id}"
    out.print(shown, highlight=False, soft_wrap=True)


def rename(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    name: Annotated[str, typer.Argument(help="Its new display name (its id stays).")],
) -> None:
    """Rename a customer (its id stays)."""
    from scrapeflow.banking import rename_customer

    config = settings(ctx)
    (customer,) = customer_ids([customer])
    on_bank_db(config, with_db(config, lambda sessions: rename_customer(sessions, customer, name)))
    out.print(f"customer {escape(customer)} is now named {escape(name)!r}", highlight=False)


def disable(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    access: Annotated[int, typer.Argument(help="The access's id (bank status).", min=1)],
) -> None:
    """Disable an access: kept with what it read, left out of refreshes and of the outcome."""
    _enable(ctx, customer, access, enabled=False)


def enable(
    ctx: typer.Context,
    customer: Annotated[str, typer.Argument(help="The customer's id.")],
    access: Annotated[int, typer.Argument(help="The access's id (bank status).", min=1)],
) -> None:
    """Enable an access again: the next refresh reads it."""
    _enable(ctx, customer, access, enabled=True)


def _enable(ctx: typer.Context, customer: str, access: int, *, enabled: bool) -> None:
    from scrapeflow.banking import enable_access

    config = settings(ctx)
    (customer,) = customer_ids([customer])
    with input_errors():
        on_bank_db(
            config,
            with_db(config, lambda sessions: enable_access(sessions, customer, access, enabled)),
        )
    out.print(
        f"access {access} of {escape(customer)} is {'enabled' if enabled else 'disabled'}",
        highlight=False,
    )

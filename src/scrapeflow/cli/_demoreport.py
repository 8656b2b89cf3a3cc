"""What the bank half of ``scrapeflow demo`` prints at the end: per customer accounts,
movements, result codes and timings beside the seed's targets, and money per currency."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scrapeflow.cli._democlient import CustomerRun

__all__ = ["BALANCES_TARGET_S", "MOVEMENTS_TARGET_S", "print_customers"]

BALANCES_TARGET_S = 10.0
MOVEMENTS_TARGET_S = 30.0


def print_customers(out: Console, runs: Sequence[CustomerRun]) -> None:
    """The summary table, each customer's money, and whether the targets were met."""
    table = Table(
        title=f"demo customers, read back from the API (movements of the last 14 days); "
        f"the seed's targets: balances in {BALANCES_TARGET_S:.0f} s, movements in "
        f"{MOVEMENTS_TARGET_S:.0f} s"
    )
    for column in ("customer", "accounts", "movements", "result", "balances s", "all updated s"):
        table.add_column(column, no_wrap=True)
    for run in runs:
        codes = sorted(set(run.results.values()))
        table.add_row(
            escape(run.id),
            str(run.accounts),
            str(run.movements),
            "/".join(f"[{'green' if c == 'success' else 'red'}]{escape(c)}[/]" for c in codes),
            _seconds(run.first_balance, BALANCES_TARGET_S),
            _seconds(run.all_updated, MOVEMENTS_TARGET_S),
        )
    out.print(table)
    for run in runs:
        money = ", ".join(
            f"{currency} {total:,.2f}" for currency, total in sorted(run.totals.items())
        )
        out.print(f"  {escape(run.id)} holds {escape(money) or 'nothing'}")
    met = all(
        r.first_balance is not None
        and r.first_balance <= BALANCES_TARGET_S
        and r.all_updated is not None
        and r.all_updated <= MOVEMENTS_TARGET_S
        for r in runs
    )
    slowest = max((r.all_updated or 0.0 for r in runs), default=0.0)
    out.print(
        f"all {len(runs)} customers refreshed at once through the service, all updated within "
        f"{slowest:.2f} s of their refresh (the one-time code included): the targets are "
        + ("[green]met[/]" if met else "[red]missed[/]")
    )


def _seconds(value: float | None, target: float) -> str:
    if value is None:
        return "[red]-[/]"
    return f"{value:.2f}" if value <= target else f"[red]{value:.2f}[/]"

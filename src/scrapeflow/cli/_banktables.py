"""How ``scrapeflow bank`` shows refreshes, accesses, accounts and movements."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from scrapeflow.cli._common import out

if TYPE_CHECKING:
    from scrapeflow.banking import AccessView, AccountView, LaunchEvent, LaunchReport, MovementView

__all__ = [
    "print_accesses",
    "print_accounts",
    "print_event",
    "print_movements",
    "report_table",
]


def print_event(event: LaunchEvent) -> None:
    """A line per accounts batch and per finished access, as a refresh goes."""
    from scrapeflow.banking import EventKind

    if event.kind is EventKind.ACCOUNTS:
        out.print(f"  {event.bank:<11} access {event.access_id}: {event.count} account(s)")
    elif event.kind is EventKind.ACCESS_FINISHED:
        out.print(f"  {event.bank:<11} access {event.access_id}: {event.result_code}")


def report_table(reports: Sequence[LaunchReport]) -> Table:
    """Per access of each refreshed customer: result, counts, times, detail."""
    table = Table(
        "customer",
        "access",
        "bank",
        "result",
        "accounts",
        "movements",
        "balances s",
        "total s",
        "detail",
    )
    for report in reports:
        if report.refused:
            table.add_row(
                escape(report.external_id),
                *("",) * 2,
                Text("refused", style="red"),
                *("",) * 4,
                escape(report.refused),
            )
        for a in report.accesses:
            table.add_row(
                escape(report.external_id),
                str(a.access_id),
                a.bank,
                Text(a.code.value, style="green" if a.code.ok else "red"),
                str(a.accounts),
                str(a.movements),
                "" if a.balances_seconds is None else f"{a.balances_seconds:.2f}",
                f"{a.seconds:.2f}",
                escape(a.detail or a.message if not a.code.ok else ""),
            )
    return table


def print_accesses(rows: Sequence[AccessView]) -> None:
    table = Table(
        "access",
        "bank",
        "login",
        "state",
        "result",
        "accounts read/stored",
        "movements read/stored",
        "finished",
        "detail",
    )
    for a in rows:
        table.add_row(
            str(a.access_id),
            a.bank,
            escape(a.login),
            a.state.value if a.enabled else f"{a.state.value} (disabled)",
            a.result.value if a.result else "",
            _read_stored(a.accounts, a.accounts_stored),
            _read_stored(a.movements, a.movements_stored),
            a.finished_at.isoformat(timespec="seconds") if a.finished_at else "",
            escape(a.detail or ""),
        )
    out.print(table)


def _read_stored(read: int, stored: int) -> Text:
    """``read/stored``, in red when the database holds fewer than was read."""
    return Text(f"{read}/{stored}", style="red" if stored < read else "")


def print_accounts(rows: Sequence[AccountView], format: str) -> None:
    from scrapeflow.banking import to_csv, to_json, to_ofx

    if format == "csv":
        sys.stdout.write(to_csv(rows, movements=False))
    elif format == "json":
        sys.stdout.write(to_json(rows) + "\n")
    elif format == "ofx":
        sys.stdout.write(to_ofx(rows, []))
    else:
        table = Table("bank", "account", "alias", "type", "currency", "balance", "updated")
        for a in rows:
            table.add_row(
                a.bank,
                a.label,
                escape(a.alias),
                a.type.value,
                a.currency,
                f"{a.balance:,.2f}",
                a.updated_at.isoformat(timespec="seconds"),
            )
        out.print(table)


def print_movements(
    moves: Sequence[MovementView], accounts: Sequence[AccountView], format: str
) -> None:
    """``accounts``: those the OFX statement covers (ignored by the other formats)."""
    from scrapeflow.banking import to_csv, to_json, to_ofx

    if format == "csv":
        sys.stdout.write(to_csv(moves, movements=True))
    elif format == "json":
        sys.stdout.write(to_json(moves) + "\n")
    elif format == "ofx":
        sys.stdout.write(to_ofx(accounts, moves))
    else:
        table = Table("date", "value", "account", "amount", "description", "pending", "balance")
        for m in moves:
            table.add_row(
                m.operation_date.isoformat(),
                m.value_date.isoformat(),
                m.account,
                f"{m.amount:,.2f} {m.currency}",
                escape(m.description),
                "yes" if m.pending else "",
                "" if m.balance_after is None else f"{m.balance_after:,.2f}",
            )
        out.print(table)
        out.print(f"{len(moves)} movement(s)")

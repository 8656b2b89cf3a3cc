"""Golden files: what a scraper read from a recording, as JSON, kept beside the recording and
compared on every run.

The file holds the result code and detail, the accounts (every field) and each account's
movements (every field), amounts as decimal text, dates ISO: a change in what the scraper reads
— a sign, a pending flag, a key — shows as a difference naming the account and the movement.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from scrapeflow._util.atomic import atomic_write_bytes
from scrapeflow.banking.testing._offline import OfflineScrape
from scrapeflow.errors import GoldenMismatch

__all__ = ["UPDATE_ENV", "check_golden", "golden_of"]

UPDATE_ENV = "SCRAPEFLOW_UPDATE_GOLDEN"
"""Set to 1 (or give pytest ``--update-golden``) to write golden files instead of comparing."""
_SHOWN = 20


def golden_of(scrape: OfflineScrape) -> dict[str, Any]:
    """What a golden file holds for ``scrape``."""
    return {
        "bank": scrape.bank,
        "result": scrape.result.value,
        "detail": scrape.detail,
        "accounts": [_plain(asdict(account)) for account in scrape.accounts],
        "movements": {
            ref: [_plain(asdict(movement)) for movement in movements]
            for ref, movements in scrape.movements.items()
        },
    }


def check_golden(scrape: OfflineScrape, path: str | os.PathLike[str], *, update: bool) -> None:
    """Compare ``scrape`` with the golden file at ``path``; with ``update``, write it instead.
    :class:`~scrapeflow.errors.GoldenMismatch` lists the differences (at most 20)."""
    target = Path(path)
    found = golden_of(scrape)
    if update:
        _write(target, found)
        return
    if not target.exists():
        raise GoldenMismatch(
            f"{target}: no golden file yet; run with --update-golden (or {UPDATE_ENV}=1) to "
            "write it, then read it before you commit it"
        )
    expected = json.loads(target.read_text(encoding="utf-8"))
    differences = list(_differences(expected, found))
    if differences:
        more = f"\n… and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
        listed = "\n".join(f"  {d}" for d in differences[:_SHOWN])
        raise GoldenMismatch(
            f"{target}: what the scraper read differs from the golden file "
            f"({len(differences)} differences; --update-golden writes it anew):\n{listed}{more}"
        )


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    if hasattr(value, "value"):  # an enum
        return value.value
    return value


def _differences(expected: Any, found: Any, where: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(found, dict):
        out: list[str] = []
        for key in sorted(set(expected) | set(found), key=str):
            at = f"{where}.{key}" if where else str(key)
            if key not in found:
                out.append(f"{at}: expected {_short(expected[key])}, not read")
            elif key not in expected:
                out.append(f"{at}: read {_short(found[key])}, not expected")
            else:
                out.extend(_differences(expected[key], found[key], at))
        return out
    if (
        isinstance(expected, list)
        and isinstance(found, list)
        and all(isinstance(x, dict) for x in [*expected, *found])
    ):
        return _list_differences(expected, found, where)
    if expected != found:
        return [f"{where}: expected {_short(expected)}, read {_short(found)}"]
    return []


def _list_differences(expected: list[Any], found: list[Any], where: str) -> list[str]:
    """Rows matched by their identity (a movement's ``key``, an account's ``bank_ref``)."""

    def ident(row: dict[str, Any], n: int) -> str:
        return str(row.get("key") or row.get("bank_ref") or n)

    before = {ident(row, n): row for n, row in enumerate(expected)}
    after = {ident(row, n): row for n, row in enumerate(found)}
    out: list[str] = []
    for name in [*before, *(n for n in after if n not in before)]:
        at = f"{where}[{name}]"
        if name not in after:
            out.append(f"{at}: expected {_short(before[name])}, not read")
        elif name not in before:
            out.append(f"{at}: read {_short(after[name])}, not expected")
        else:
            out.extend(_differences(before[name], after[name], at))
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:157] + "…"


def _write(target: Path, golden: dict[str, Any]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(target, text.encode(), fsync=True)

"""The ``egress_allow`` setting's entries, read once for the settings and the HTTP layer alike
(here, so that the HTTP layer need not import the settings' model to read them)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["parse_egress_allow"]


def parse_egress_allow(items: Iterable[str]) -> tuple[str, ...]:
    """The ``egress_allow`` entries, checked and normalised: CIDRs or addresses (``10.0.0.0/8``,
    ``127.0.0.2``) and host names (``hooks.internal``, or ``.corp.example`` for every name
    under it). Raises ``ValueError`` naming the first bad entry."""
    entries: list[str] = []
    for raw in items:
        entry = raw.strip().lower()
        entry = entry[:-1] if entry.endswith(".") and not entry.endswith("..") else entry
        if not entry:
            continue
        try:
            entries.append(str(ipaddress.ip_network(entry.strip("[]"), strict=False)))
            continue
        except ValueError:
            pass
        name = entry.removeprefix(".")
        labels = name.split(".")
        if (
            not name
            or len(name) > 253
            or any(not label or len(label) > 63 for label in labels)
            or not all(c.isalnum() or c in "-_" for label in labels for c in label)
        ):
            raise ValueError(f"{raw.strip()!r} is neither a CIDR nor a host name")
        entries.append(entry)
    return tuple(dict.fromkeys(entries))

"""Hostility: how hard a sandbox site makes scraping. Three profiles; every switch settable alone.

=================  ======  =========  =======  ==================================================
switch             none    realistic  hostile  meaning
=================  ======  =========  =======  ==================================================
rate_limit_rps     0       20         5        requests/s allowed per client IP (0: no limit)
rate_limit_burst   0       40         10       requests an idle client IP may send at once
ban_after          0       30         8        requests sent while told to wait (429) before a ban
ban_seconds        0       60         300      how long a ban lasts
ban_mode           403     403        empty    banned IPs get 403 pages, or silent empty pages
error_rate         0       0.01       0.03     share of requests answered 500/502/503
slow_rate          0       0.002      0.01     share answered only after ``slow_seconds``
slow_seconds       0       20         40       (past typical client timeouts)
drop_rate          0       0.002      0.01     share whose connection is dropped with no answer
captcha_rate       0       0.01       0.05     share answered by a CAPTCHA page with status 200
check_headers      False   True       True     block bot user agents and incoherent browser headers
=================  ======  =========  =======  ==================================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["PROFILES", "Hostility"]

BanMode = Literal["403", "empty"]


@dataclass(frozen=True, slots=True)
class Hostility:
    """The defences of a sandbox site. ``Hostility.profile("realistic")`` for a named set."""

    rate_limit_rps: float = 0.0
    rate_limit_burst: int = 0
    ban_after: int = 0
    ban_seconds: float = 0.0
    ban_mode: BanMode = "403"
    error_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 0.0
    drop_rate: float = 0.0
    captcha_rate: float = 0.0
    check_headers: bool = False

    def __post_init__(self) -> None:
        for name in ("error_rate", "slow_rate", "drop_rate", "captcha_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"hostility {name} must be between 0 and 1, got {value}")
        for name in ("rate_limit_rps", "rate_limit_burst", "ban_after", "ban_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"hostility {name} must not be negative")
        if self.slow_seconds < 0:
            raise ValueError("hostility slow_seconds must not be negative")
        if self.ban_mode not in ("403", "empty"):
            raise ValueError(f"hostility ban_mode must be '403' or 'empty', got {self.ban_mode!r}")

    @classmethod
    def profile(cls, name: str) -> Hostility:
        """The named profile: ``none``, ``realistic`` or ``hostile``."""
        try:
            return PROFILES[name]
        except KeyError:
            raise ValueError(
                f"unknown hostility profile {name!r} (profiles: {', '.join(PROFILES)})"
            ) from None

    def with_switches(self, switches: dict[str, Any]) -> Hostility:
        """A copy with some switches changed; values may be strings (from a command line)."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, value in switches.items():
            if name not in fields:
                raise ValueError(
                    f"unknown hostility switch {name!r} (switches: {', '.join(fields)})"
                )
            changes[name] = _coerce(name, getattr(self, name), value)
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(name: str, current: Any, value: Any) -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"hostility {name} must be true or false, got {value!r}")
    if isinstance(current, int | float) and not isinstance(value, bool):
        try:
            return type(current)(value)
        except (TypeError, ValueError):
            raise ValueError(f"hostility {name} must be a number, got {value!r}") from None
    return str(value)


PROFILES: dict[str, Hostility] = {
    "none": Hostility(),
    "realistic": Hostility(
        rate_limit_rps=20,
        rate_limit_burst=40,
        ban_after=30,
        ban_seconds=60,
        error_rate=0.01,
        slow_rate=0.002,
        slow_seconds=20,
        drop_rate=0.002,
        captcha_rate=0.01,
        check_headers=True,
    ),
    "hostile": Hostility(
        rate_limit_rps=5,
        rate_limit_burst=10,
        ban_after=8,
        ban_seconds=300,
        ban_mode="empty",
        error_rate=0.03,
        slow_rate=0.01,
        slow_seconds=40,
        drop_rate=0.01,
        captcha_rate=0.05,
        check_headers=True,
    ),
}

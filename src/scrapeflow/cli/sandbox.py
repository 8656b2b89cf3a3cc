"""``scrapeflow sandbox``: every adversarial test site on loopback until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scrapeflow.cli._common import fail, run_async, settings

__all__ = ["sandbox"]

_MAX_LATENCY_MS = 60_000.0
"""A minute per response: slower is never what a test wants (and inf would hang every client)."""


def sandbox(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Loopback address to serve on (127.0.0.0/8, ::1, localhost).")
    ] = "127.0.0.1",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Allow a --host beyond loopback: the admin API gives out bank passwords.",
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Same seed, same data.")] = 0,
    latency_ms: Annotated[
        str | None,
        typer.Option(
            help="Latency per response, 'A-B' ms (at most 60000), for every site "
            "(default: per site)."
        ),
    ] = None,
    hostility: Annotated[
        str, typer.Option(help="Profile: none, realistic or hostile.")
    ] = "realistic",
    switch: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change one hostility switch: NAME=VALUE (repeatable)."),
    ] = None,
    customers: Annotated[
        int, typer.Option(min=1, max=999_999, help="Customers at each bank.")
    ] = 10_000,
    manifest: Annotated[
        Path | None, typer.Option(help="Also write the manifest (sites, admin token) here.")
    ] = None,
) -> None:
    """Serve every sandbox site on loopback until Ctrl-C; print the manifest as JSON.

    The admin token comes from SCRAPEFLOW_SANDBOX_ADMIN_TOKEN, or is made up and printed. The
    manifest file is written owner-only (0600): it holds the token.
    """
    import asyncio
    import json

    from scrapeflow._util.atomic import atomic_write_bytes
    from scrapeflow.sandbox import Sandbox, SandboxConfig

    token = settings(ctx).sandbox_admin_token
    try:
        latency = None if latency_ms is None else _parse_range(latency_ms)
    except ValueError:
        fail(
            f"--latency-ms must be 'A-B' with 0 <= A <= B <= {_MAX_LATENCY_MS:,.0f}, "
            f"got {latency_ms!r}"
        )
    if manifest is not None:
        _check_writable(manifest)
    switches: dict[str, str] = {}
    for item in switch or []:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"--set wants NAME=VALUE, got {item!r}")
        switches[name.strip()] = value.strip()
    try:
        config = SandboxConfig(
            host=host,
            seed=seed,
            hostility=hostility,
            switches=switches,
            latency_ms=latency,
            admin_token=token.get_secret_value() if token else None,
            customers=customers,
            allow_remote=allow_remote,
        )
        running = Sandbox(config)
    except ValueError as exc:
        fail(str(exc))

    async def serve_forever() -> None:
        async with running:
            text = json.dumps(running.manifest())
            if manifest is not None:
                atomic_write_bytes(manifest, (text + "\n").encode())
            print(text, flush=True)
            await asyncio.Event().wait()

    try:
        run_async(serve_forever())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        fail(f"cannot serve on {host}: {exc.strerror or exc}")


def _parse_range(text: str) -> tuple[float, float]:
    low_text, _, high_text = text.partition("-")
    low = float(low_text)
    high = float(high_text) if high_text else low
    if not 0 <= low <= high <= _MAX_LATENCY_MS:  # also refuses nan and inf
        raise ValueError(text)
    return low, high


def _check_writable(manifest: Path) -> None:
    """Refuse, before serving, a --manifest that cannot be written."""
    import os

    if manifest.is_dir():
        fail(f"--manifest {manifest}: is a directory")
    parent = manifest.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--manifest {manifest}: {parent} is not a writable directory")

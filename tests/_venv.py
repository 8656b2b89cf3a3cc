"""A virtual environment that sees this one's packages (scrapeflow, pytest…) and into which a
package can be installed without touching this one: what a bank author's terminal is after
``pip install -e .`` of their bank, for the tests of ``scrapeflow bank new``."""

from __future__ import annotations

import subprocess
import sysconfig
import venv
from pathlib import Path

__all__ = ["child_environment"]

_COMMANDS = {"pip": "pip", "scrapeflow": "scrapeflow", "pytest": "pytest"}


def child_environment(where: Path) -> Path:
    """Make the environment at ``where``; its ``bin`` directory, whose ``python``, ``pip``,
    ``scrapeflow`` and ``pytest`` are the environment's own."""
    venv.create(where, with_pip=False)
    bin_dir = where / "bin"
    python = bin_dir / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "_scrapeflow_parent.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"
    )
    for command, module in _COMMANDS.items():
        script = bin_dir / command
        script.write_text(f'#!/bin/sh\nexec "{python}" -m {module} "$@"\n')
        script.chmod(0o755)
    return bin_dir

"""Cold start of the ``scrapeflow`` command, beside ``python -c pass`` on the same machine.

Each command runs as a whole new process, the way a user or a cron job runs it, ``--runs`` times
in turn with the others (A B C … A B C …, so drift hits every command alike); the median wall
time of each is printed with its ratio to the bare interpreter:

* ``python -c pass``: the floor, the interpreter alone;
* ``scrapeflow --help`` and ``scrapeflow bank --help`` (goal: under 0.3 s each);
* ``scrapeflow run`` on 10 URLs of the sandbox plain site (served by a separate process), into a
  fresh directory each time: start, scrape, status files, summary;
* ``scrapeflow bank status`` of a customer on a migrated SQLite database.

    .venv/bin/python bench/startup.py             # about a minute
    .venv/bin/python bench/startup.py --runs 5    # quicker

Results go to ``bench/results/startup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loopback import LoopbackServer, machine_info, median, page_urls

RESULTS = Path(__file__).resolve().parent / "results" / "startup.json"
HELP_GOAL_S = 0.3
SCRAPEFLOW = [sys.executable, "-m", "scrapeflow"]


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[2:])} failed ({done.returncode}): {done.stderr.decode()[-500:]}"
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    args = parser.parse_args()
    machine = machine_info()
    print(
        f"scrapeflow startup bench, {machine['date']}: {machine['nproc']} cores, "
        f"Python {machine['python']}, commit {machine['git_commit'] or '?'}"
    )
    work = Path(tempfile.mkdtemp(prefix="sf-startup-"))
    env = {
        **os.environ,
        "SCRAPEFLOW_DB_URL": f"sqlite+aiosqlite:///{work / 'bank.db'}",
    }
    try:
        subprocess.run(
            [*SCRAPEFLOW, "bank", "add-customer", "ana"], env=env, check=True, capture_output=True
        )
        with LoopbackServer(pages=1_000, warm=10) as server:
            urls = work / "urls.txt"
            urls.write_text("\n".join(page_urls(server.url, 10)) + "\n")
            commands: dict[str, list[str]] = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "scrapeflow --help": [*SCRAPEFLOW, "--help"],
                "scrapeflow bank --help": [*SCRAPEFLOW, "bank", "--help"],
                "scrapeflow run (10 URLs)": [*SCRAPEFLOW, "run", str(urls), "--dir"],
                "scrapeflow bank status": [*SCRAPEFLOW, "bank", "status", "ana"],
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            for run in range(args.runs + 1):  # the first round warms the page cache: not counted
                for name, command in commands.items():
                    if name.startswith("scrapeflow run"):
                        target = work / f"run-{run}"
                        seconds = _timed([*command, str(target)], env)
                        shutil.rmtree(target)
                    else:
                        seconds = _timed(command, env)
                    if run:
                        times[name].append(seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = median(times["python -c pass"])
    rows: list[dict[str, Any]] = []
    print(f"\n{'command':<28}{'median s':>10}{'min s':>8}{'max s':>8}{'vs python':>11}")
    for name, values in times.items():
        row = {
            "command": name,
            "median_s": round(median(values), 3),
            "min_s": round(min(values), 3),
            "max_s": round(max(values), 3),
            "vs_python": round(median(values) / floor, 1),
        }
        rows.append(row)
        print(
            f"{name:<28}{row['median_s']:>10.3f}{row['min_s']:>8.3f}{row['max_s']:>8.3f}"
            f"{row['vs_python']:>10.1f}x"
        )
    helps = [r for r in rows if r["command"].endswith("--help")]
    verdict = all(r["median_s"] < HELP_GOAL_S for r in helps)
    print(f"--help under {HELP_GOAL_S} s: {'PASS' if verdict else 'FAIL'}")
    results = {
        "bench": "startup",
        "machine": machine,
        "runs": args.runs,
        "commands": rows,
        "help_goal_s": HELP_GOAL_S,
        "help_pass": verdict,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results in {args.output}")


if __name__ == "__main__":
    main()

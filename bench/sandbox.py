"""The feed's own ceiling: requests per second of its HTML pages and of its JSON endpoint.

The feed (hostility ``none``, no latency, seed 0, 1,000 profiles, 50 posts a page) runs in a
process of its own; this process is the load generator: one ``aiohttp.ClientSession``,
``--concurrency`` workers, ``--requests`` requests per run. Everything a request needs (URL,
``X-Instagram-GIS`` signature) is made before the clock starts, and bodies are read, not parsed,
so the client spends what little it can. The CPU seconds of both processes are taken around
each run: a server CPU share near 1.0 means the figure is the server's ceiling (it is one
Python process), well under 1.0 means the client or the machine was the limit. "1-core req/s"
is requests over the server's CPU seconds: what the feed would serve with a core of its own,
the figure to trust on a busy machine.

* ``html``: ``GET /u/{profile}?page=N`` over every profile, full pages of 50 posts;
* ``json``: ``GET /graphql/query/?variables=...`` with ``first`` 50, a tenth of them first
  pages and the rest pages after a cursor collected beforehand.

    .venv/bin/python bench/sandbox.py            # 3 runs of 5,000 requests each, per endpoint
    .venv/bin/python bench/sandbox.py --quick    # one run of 1,000

Results go to ``bench/results/sandbox.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from _loopback import cpu_seconds_of, cpu_seconds_self, machine_info, median

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
SEED, PROFILES, PAGE_SIZE = 0, 1000, 50

Request = tuple[str, dict[str, str]]


# --- the server process -----------------------------------------------------------------------


async def _serve() -> None:
    from scrapeflow.sandbox import serve
    from scrapeflow.sandbox._feed import FeedSite
    from scrapeflow.sandbox._site import SandboxState

    site = FeedSite(SandboxState(seed=SEED, admin_token="bench"), profiles=PROFILES)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1() or stop.set())
    async with serve(site.app()) as url:
        print(url, flush=True)
        await stop.wait()


@contextlib.contextmanager
def feed_process() -> Iterator[tuple[str, int]]:
    """The feed in a subprocess: yields its URL and pid; closing its stdin stops it."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("http://"):
            raise RuntimeError("the feed did not start")
        yield line.strip(), process.pid
    finally:
        if process.stdin:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait()
        if process.stdout:
            process.stdout.close()


# --- the requests -----------------------------------------------------------------------------


def html_requests(base: str) -> list[Request]:
    """Every full page of every profile, interleaved across profiles."""
    from scrapeflow.sandbox._feed import FeedSite
    from scrapeflow.sandbox._site import SandboxState

    site = FeedSite(SandboxState(seed=SEED, admin_token="bench"), profiles=PROFILES)
    full_pages = [site.post_count(f"user{n:04d}") // PAGE_SIZE for n in range(PROFILES)]
    out: list[Request] = []
    for page in range(1, max(full_pages) + 1):
        out += [
            (f"{base}/u/user{n:04d}?page={page}", {})
            for n in range(PROFILES)
            if full_pages[n] >= page
        ]
    return out


async def json_requests(session: aiohttp.ClientSession, base: str, count: int) -> list[Request]:
    """Signed requests: first pages of many profiles and pages after cursors walked to."""
    async with session.get(f"{base}/u/user0000") as r:
        html = await r.text()
    rhx_gis = json.loads(html.split("window._sharedData = ")[1].split(";</script>")[0])["rhx_gis"]

    def signed(variables: dict[str, Any]) -> Request:
        text = json.dumps(variables, separators=(",", ":"))
        signature = hashlib.md5(f"{rhx_gis}:{text}".encode()).hexdigest()
        return f"{base}/graphql/query/?variables={quote(text)}", {"X-Instagram-GIS": signature}

    out: list[Request] = []
    for n in range(PROFILES):
        variables: dict[str, Any] = {"id": f"user{n:04d}", "first": PAGE_SIZE}
        for _ in range(10):  # the first page, then up to 9 more after its cursors
            url, headers = signed(variables)
            async with session.get(url, headers=headers) as r:
                body = await r.json()
            media = body["data"]["user"]["edge_owner_to_timeline_media"]
            if len(media["edges"]) < PAGE_SIZE:
                break
            out.append((url, headers))
            if not media["page_info"]["has_next_page"]:
                break
            variables["after"] = media["page_info"]["end_cursor"]
        if len(out) >= count:
            break
    return out


# --- the load generator -----------------------------------------------------------------------


async def load(
    session: aiohttp.ClientSession, requests: list[Request], count: int, concurrency: int, pid: int
) -> dict[str, Any]:
    """``count`` requests (cycling through ``requests``), ``concurrency`` at once."""
    latencies: list[float] = []
    errors = 0
    next_index = 0

    async def worker() -> None:
        nonlocal errors, next_index
        while next_index < count:
            url, headers = requests[next_index % len(requests)]
            next_index += 1
            started = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as r:
                    await r.read()
                    ok = r.status == 200
            except aiohttp.ClientError:
                ok = False
            latencies.append(time.perf_counter() - started)
            errors += not ok

    server_cpu, client_cpu, started = cpu_seconds_of(pid), cpu_seconds_self(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    server_cpu = cpu_seconds_of(pid) - server_cpu
    latencies.sort()
    return {
        "requests": count,
        "errors": errors,
        "seconds": round(seconds, 3),
        "requests_per_second": round(count / seconds, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
        "server_cpu_share": round(server_cpu / seconds, 2),
        "server_cpu_us_per_request": round(server_cpu / count * 1e6),
        # What one core kept busy would serve: the ceiling if the server were the only limit.
        "one_core_requests_per_second": round(count / server_cpu) if server_cpu else None,
        "client_cpu_share": round((cpu_seconds_self() - client_cpu) / seconds, 2),
    }


async def bench(count: int, concurrency: int, repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with feed_process() as (base, pid):
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            endpoints = {
                "html": html_requests(base),
                "json": await json_requests(session, base, count),
            }
            for name, requests in endpoints.items():
                await load(session, requests, min(count, 500), concurrency, pid)  # warm-up
                runs = [
                    await load(session, requests, count, concurrency, pid) for _ in range(repeat)
                ]
                rates = [run["requests_per_second"] for run in runs]
                cores = [run["one_core_requests_per_second"] or 0 for run in runs]
                results[name] = {
                    "median_requests_per_second": round(median(rates), 1),
                    "median_one_core_requests_per_second": round(median(cores)),
                    "distinct_requests": len(requests),
                    "runs": runs,
                }
    return results


def print_table(results: dict[str, Any]) -> None:
    """One row per endpoint: the median rates, and the figures of the run nearest the median."""
    columns = ("req/s", "1-core req/s", "p50 ms", "p99 ms", "server CPU", "client CPU", "errors")
    print(f"{'endpoint':<9}" + "".join(f"{c:>13}" for c in columns))
    for name, result in results.items():
        rate = result["median_requests_per_second"]
        run = min(result["runs"], key=lambda r: abs(r["requests_per_second"] - rate))
        errors = sum(r["errors"] for r in result["runs"])
        shares = (run["p50_ms"], run["p99_ms"], run["server_cpu_share"], run["client_cpu_share"])
        print(
            f"{name:<9}{rate:>13.0f}{result['median_one_core_requests_per_second']:>13.0f}"
            + "".join(f"{c:>13.2f}" for c in shares)
            + f"{errors:>13}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of 1,000 requests")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    if args.quick:
        args.requests, args.repeat = 1000, 1
    results = asyncio.run(bench(args.requests, args.concurrency, args.repeat))
    print_table(results)
    report = {
        "machine": machine_info(),
        "settings": {
            "requests": args.requests,
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "hostility": "none",
            "latency_ms": [0, 0],
            "profiles": PROFILES,
            "page_size": PAGE_SIZE,
        },
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()

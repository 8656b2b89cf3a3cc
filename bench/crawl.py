"""A whole crawl by scrapeflow's crawler (``scrapeflow.crawl``) and by Scrapy's ``CrawlSpider``.

The same crawl, by each contender in a fresh process, on the same server in the same run:

1. **plain site**: the sandbox PlainSite of ``--pages`` (20,000) pages, served by a process of
   its own with every page rendered ahead (``bench/_loopback.py``'s server, given one more
   route by this bench, ``/_bench/hits``, that tells how often each page was served). From
   ``/page/0``, follow the links of ``ul.links``, an item ``{"url", "title"}`` per page (the
   ``h1``'s text), no depth limit. Each page links to 8 pages drawn at random, so a few have no
   link to them (12 of 20,000): the pages reachable from page 0, found here by walking the
   site's own link table, are what both contenders must export, to the item, or the bench
   stops;
2. **docs**: nginx serving Debian's Python docs (``python3-doc``, ~530 pages). From
   ``index.html``, follow every ``a`` whose URL, its fragment dropped, ends in ``.html`` on the
   same host name (scrapeflow: ``enqueue_links("a", include=[re.compile(r"\\.html$")])`` and its
   default strategy same-hostname; Scrapy: ``LinkExtractor(allow=r"\\.html$",
   process_value=<drop the fragment>)`` and ``allowed_domains``), an item ``{"url", "title"}``
   per page (``title::text``). Both must export the same items, as sets;
3. **resume after kill -9**: the plain site of ``--resume-pages`` (5,000) pages, each
   contender with its crawl state (scrapeflow: the crawler's directory; Scrapy: ``JOBDIR``)
   is killed with SIGKILL once half the reachable pages' items are in its export (the file's
   lines, read every 10 ms), then run again to its end (``--resume-timeout`` at most).
   Counted: the fetches of each run (by the server), the pages fetched more than once, the
   export's lines against the reachable pages (missing, duplicated, cut lines), whether the
   second run ended by itself.

Contenders, with the same settings where both have them: ``--concurrency`` (32) requests in
flight and as many per host (Scrapy ``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN``; scrapeflow ``CrawlConfig(concurrency, per_host)``); robots.txt
not read, no cookies, 2 retries, logs at INFO (no line per request), a JSON-lines export
(Scrapy's ``FEEDS``, scrapeflow's ``exports``), asyncio (Scrapy's ``AsyncioSelectorReactor``;
scrapeflow ``asyncio.run``, the default loop):

* **scrapeflow**: this file run as ``--client``, a ``Router`` with one default handler and a
  ``Crawler`` whose directory (one status file per page, the resumable frontier) is in the
  bench's scratch directory;
* **Scrapy** 2.x (``bench/_scrapy_crawl.py``, in ``bench/.venv-scrapy``, made by
  ``bench/fetch.py``'s ``ensure_scrapy_venv`` if missing): a ``CrawlSpider`` with one
  ``Rule(LinkExtractor(...), callback=..., follow=True)``, its start page parsed by the same
  callback, its start request filtered like any other so that each page is fetched once (as
  scrapeflow, where a request is its fingerprint). Without ``JOBDIR`` in parts 1 and 2 (its
  default: the queue in memory, nothing to resume), while scrapeflow writes every page's state
  as it goes (it has no other mode).

The plain site is crawled ``--repeat`` (1) times by each, Scrapy's run there taking about four
minutes; the docs ``--docs-repeat`` (3) times, the order rotating; medians are shown.

Seconds are each process's wall time, start to exit (interpreter start and imports included,
as a user waits for them); the contenders' own timers (Scrapy's spider open to close,
scrapeflow's crawler run) are kept as "in-run". CPU is the user and system time of the
contender's process (``getrusage`` of the children waited for), the server's is shown as a
share of the wall time (100% = a core); peak RSS is the process's high-water mark (``VmHWM``,
read from ``/proc`` every 50 ms). The ratios are scrapeflow's over Scrapy's: pages per CPU
second (goal >= 3x) and pages per wall second (goal >= 2x).

State directories and exports go to ``--scratch`` (a directory made in ``bench/``, removed at
the end: the repository's filesystem, where this VM creates files faster than in ``/tmp``).

    .venv/bin/python bench/crawl.py            # the recorded figures (~7 minutes)
    .venv/bin/python bench/crawl.py --quick    # 2,000 pages, 1,000 to resume (~1.5 minutes)
    .venv/bin/python bench/crawl.py --parts resume --resume-pages 2000

Results go to ``bench/results/crawl.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _loopback import (
    DOCS_ROOT,
    LoopbackServer,
    NginxServer,
    client_report,
    cpu_seconds_of,
    docs_pages,
    filesystem_of,
    machine_info,
    median,
)
from fetch import SCRAPY_VENV, TreeWatcher, _children_cpu, ensure_scrapy_venv

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results" / "crawl.json"
SCRAPY_CLIENT = BENCH / "_scrapy_crawl.py"
CPU_GOAL = 3.0  # scrapeflow / Scrapy, pages per CPU second
WALL_GOAL = 2.0  # scrapeflow / Scrapy, pages per wall second
CONTENDERS = ("scrapeflow", "scrapy")
LABELS = {"scrapeflow": "scrapeflow crawl", "scrapy": "Scrapy CrawlSpider"}
PARTS = ("plain", "docs", "resume")
HITS_PATH = "/_bench/hits"
POLL_EVERY = 0.01  # seconds between two reads of the export of a crawl to be killed


# --- the scrapeflow client (run in its own process) -----------------------------------------


async def scrapeflow_crawl(
    site: str, start_url: str, directory: str, export: str, concurrency: int, retries: int
) -> dict[str, Any]:
    """Crawl ``site`` from ``start_url`` with scrapeflow's crawler; its summary."""
    from scrapeflow.crawl import CrawlConfig, Crawler, Router

    router = Router()
    if site == "plain":

        @router.default_handler
        async def plain_page(response: Any) -> Any:
            response.enqueue_links("ul.links a")
            yield {"url": response.url, "title": response.css("h1::text").get()}

    else:
        html = re.compile(r"\.html$")

        @router.default_handler
        async def docs_page(response: Any) -> Any:
            response.enqueue_links("a", include=[html])
            yield {"url": response.url, "title": response.css("title::text").get()}

    config = CrawlConfig(
        concurrency=concurrency, per_host=concurrency, obey_robots=False, retries=retries
    )
    crawler = Crawler(router, directory, config=config, exports=[export])
    summary = await crawler.run([start_url])
    return summary.as_dict()


def _client_main(args: argparse.Namespace) -> None:
    from scrapeflow._util.logs import configure_logging

    configure_logging("INFO")  # as the CLI at --log-level INFO: no line per request
    started = time.perf_counter()
    summary = asyncio.run(
        scrapeflow_crawl(
            args.site, args.start, args.dir, args.export, args.concurrency, args.retries
        )
    )
    client_report(
        contender="scrapeflow",
        seconds=round(time.perf_counter() - started, 4),
        pages=summary["pages"],
        items=summary["items"],
        summary=summary,
    )


# --- the plain site's server, counting the pages it serves ----------------------------------


def _serve_counting(pages: int) -> None:
    """The server process of :class:`CountingServer`: ``_loopback``'s own, its plain site given
    one more route, ``GET /_bench/hits``: how often each page was served (the site's own
    ``hits`` counter, which it keeps for every request anyway)."""
    from aiohttp import web

    import _loopback
    from scrapeflow.sandbox import PlainSite

    site_app = PlainSite.app

    def counted_app(site: PlainSite) -> web.Application:
        app = site_app(site)

        async def hits(request: web.Request) -> web.Response:
            served = {p: n for p, n in site.hits.items() if p.startswith("/page/")}
            return web.json_response(served)

        app.router.add_get(HITS_PATH, hits)
        return app

    setattr(PlainSite, "app", counted_app)  # noqa: B010 - this process serves nothing else
    _loopback._serve_main([f"--pages={pages}", f"--warm={pages}"])


class CountingServer(LoopbackServer):
    """``LoopbackServer(pages=N, warm=N)`` whose site also answers ``/_bench/hits``."""

    def __init__(self, *, pages: int, startup_timeout: float = 300.0) -> None:
        super().__init__(pages=pages, warm=pages, startup_timeout=startup_timeout)

    def __enter__(self) -> CountingServer:
        command = [sys.executable, str(Path(__file__).resolve()), f"--serve={self.pages}"]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self._process.stdout is None:  # pragma: no cover - stdout=PIPE gives one
            raise RuntimeError("no stdout pipe to the server")
        deadline = time.monotonic() + self.startup_timeout
        line = ""
        while not line.startswith("http://"):
            remaining = deadline - time.monotonic()
            ready = remaining > 0 and select.select([self._process.stdout], [], [], remaining)[0]
            line = self._process.stdout.readline() if ready else ""
            if not line:
                self.__exit__(None, None, None)
                raise RuntimeError("the counting server did not start (no URL on its stdout)")
        self.url = line.strip()
        return self

    def hits(self) -> dict[str, int]:
        """How often each page was served so far, by path."""
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(self.url + HITS_PATH, timeout=30) as answer:
            served: dict[str, int] = json.loads(answer.read())
        return served


def reachable_pages(pages: int) -> list[int]:
    """The plain site's pages reachable from page 0 by its links (the site's own table)."""
    from scrapeflow.sandbox import PlainSite, SiteConfig

    site = PlainSite(SiteConfig(pages=pages))
    seen, todo = {0}, [0]
    while todo:
        for linked in site.page_links(todo.pop()):
            if linked not in seen:
                seen.add(linked)
                todo.append(linked)
    return sorted(seen)


def plain_items(base_url: str, pages: int) -> set[tuple[str, str]]:
    """The items a crawl of the plain site from page 0 must export: (url, title)."""
    from scrapeflow.sandbox import PlainSite, SiteConfig

    site = PlainSite(SiteConfig(pages=pages))
    return {(f"{base_url}/page/{n}", site.page_title(n)) for n in reachable_pages(pages)}


def served_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """The pages served between two ``hits()``, and how often each."""
    return {p: n - before.get(p, 0) for p, n in after.items() if n > before.get(p, 0)}


# --- running a contender ----------------------------------------------------------------------


def contender_command(
    contender: str,
    *,
    site: str,
    start_url: str,
    state: Path,
    export: Path,
    concurrency: int,
    retries: int,
    jobdir: bool = False,
) -> list[str]:
    """The command line of one crawl. ``state`` is scrapeflow's directory, and Scrapy's
    ``JOBDIR`` with ``jobdir`` (without, Scrapy keeps its queue in memory: its default)."""
    if contender == "scrapeflow":
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            "--client",
            f"--site={site}",
            f"--start={start_url}",
            f"--dir={state}",
            f"--export={export}",
            f"--concurrency={concurrency}",
            f"--retries={retries}",
        ]
    command = [
        str(SCRAPY_VENV / "bin" / "python"),
        str(SCRAPY_CLIENT),
        site,
        start_url,
        str(export),
        f"--concurrency={concurrency}",
        f"--retries={retries}",
    ]
    return [*command, f"--jobdir={state}"] if jobdir else command


def run_process(
    command: list[str],
    *,
    cwd: Path,
    server_pid: int,
    kill_at: int | None = None,
    export: Path | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``command`` to its end (or SIGKILL it once ``export`` has ``kill_at`` lines, or
    after ``timeout`` seconds); its wall time, CPU, peak RSS, exit status and output."""
    os.sync()  # the previous run's dirty pages are not this run's writes
    out_path, err_path = cwd / "stdout.txt", cwd / "stderr.txt"
    killed = timed_out = False
    lines = 0
    with open(out_path, "w") as out, open(err_path, "w") as err:
        server_cpu, (user, system) = cpu_seconds_of(server_pid), _children_cpu()
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        with TreeWatcher(process.pid) as watcher:
            if kill_at is not None and export is not None:
                lines = _kill_at(process, export, kill_at)
                killed = process.returncode == -signal.SIGKILL
            try:
                returncode = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                returncode = process.wait()
                timed_out = True
        wall = time.perf_counter() - started
        user_after, system_after = _children_cpu()
        server_cpu = cpu_seconds_of(server_pid) - server_cpu
    return {
        "seconds": wall,
        "returncode": returncode,
        "killed": killed,
        "timed_out": timed_out,
        "lines_at_kill": lines if killed else None,
        "client_user_seconds": user_after - user,
        "client_sys_seconds": system_after - system,
        "server_cpu_seconds": server_cpu,
        "peak_rss_mb": watcher.peak_rss_mb,
        "stdout": out_path.read_text(),
        "stderr": err_path.read_text(),
    }


def _kill_at(process: subprocess.Popen[bytes], export: Path, lines: int) -> int:
    """SIGKILL ``process`` (its whole session) once ``export`` holds ``lines`` lines; the lines
    counted then (fewer if it ended first)."""
    counted, offset = 0, 0
    while process.poll() is None:
        with contextlib.suppress(FileNotFoundError), open(export, "rb") as f:
            f.seek(offset)
            chunk = f.read()
            offset += len(chunk)
            counted += chunk.count(b"\n")
        if counted >= lines:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            break
        time.sleep(POLL_EVERY)
    return counted


def _report(run: dict[str, Any], contender: str) -> dict[str, Any]:
    lines = run["stdout"].strip().splitlines()
    if run["returncode"] != 0 or not lines:
        raise RuntimeError(f"{contender} failed ({run['returncode']}):\n{run['stderr'][-4000:]}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def read_export(path: Path) -> tuple[list[tuple[str, str]], int]:
    """The items of a JSON-lines export as (url, title), and its lines that are not JSON (a
    line cut by a kill)."""
    items: list[tuple[str, str]] = []
    broken = 0
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        for line in f:
            try:
                item = json.loads(line)
                items.append((item["url"], item["title"]))
            except (ValueError, KeyError, TypeError):
                broken += 1
    return items, broken


def run_crawl(
    contender: str,
    *,
    site: str,
    start_url: str,
    scratch: Path,
    args: argparse.Namespace,
    server: CountingServer | NginxServer,
) -> tuple[dict[str, Any], set[tuple[str, str]]]:
    """One crawl to its end in a fresh directory; its row and its items."""
    work = Path(tempfile.mkdtemp(prefix=f"{contender}-{site}-", dir=scratch)).resolve()
    export = work / "items.jsonl"
    command = contender_command(
        contender,
        site=site,
        start_url=start_url,
        state=work / "state",
        export=export,
        concurrency=args.concurrency,
        retries=args.retries,
    )
    before = server.hits() if isinstance(server, CountingServer) else None
    try:
        run = run_process(command, cwd=work, server_pid=server.pid)
        report = _report(run, contender)
        listed, broken = read_export(export)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    items = set(listed)
    seconds, pages = run["seconds"], report["pages"]
    cpu = run["client_user_seconds"] + run["client_sys_seconds"]
    row: dict[str, Any] = {
        "contender": contender,
        "pages": pages,
        "items": report["items"],
        "exported_lines": len(listed) + broken,
        "exported_unique": len(items),
        "seconds": round(seconds, 3),
        "in_run_seconds": round(report["seconds"], 3),
        "pages_per_second": round(pages / seconds, 1),
        "in_run_pages_per_second": round(pages / report["seconds"], 1),
        "client_user_seconds": round(run["client_user_seconds"], 2),
        "client_sys_seconds": round(run["client_sys_seconds"], 2),
        "cpu_ms_per_page": round(1000 * cpu / pages, 3),
        "pages_per_cpu_second": round(pages / cpu, 1),
        "peak_rss_mb": round(run["peak_rss_mb"], 1),
        "server_cpu_share": round(run["server_cpu_seconds"] / seconds, 3),
    }
    if before is not None and isinstance(server, CountingServer):
        served = served_delta(server.hits(), before)
        row["server_fetches"] = sum(served.values())
        row["server_pages"] = len(served)
    if contender == "scrapy":
        row["scrapy"] = report.get("scrapy")
        row["finish_reason"] = report.get("finish_reason")
        row["stats"] = report.get("stats")
    else:
        row["summary"] = report.get("summary")
    return row, items


# --- the parts --------------------------------------------------------------------------------


def crawl_part(
    site: str, *, args: argparse.Namespace, scratch: Path, contenders: tuple[str, ...]
) -> dict[str, Any]:
    """Each contender crawls ``site`` ``repeat`` times, the order rotating; every run's items
    must be the expected ones (the plain site's reachable pages; for the docs, the first
    run's)."""
    repeat = args.repeat if site == "plain" else args.docs_repeat
    server: CountingServer | NginxServer
    server = CountingServer(pages=args.pages) if site == "plain" else NginxServer(DOCS_ROOT)
    with server:
        expected: set[tuple[str, str]] | None = None
        if site == "plain":
            start_url = f"{server.url}/page/0"
            expected = plain_items(server.url, args.pages)
            what = (
                f"the plain site, {args.pages:,} pages ({len(expected):,} reachable from "
                "page 0), follow `ul.links a`, item {url, h1 text}"
            )
        else:
            start_url = f"{server.url}/index.html"
            what = (
                f"nginx serving the Python docs ({len(docs_pages()):,} .html files), from "
                "index.html follow every `a` to a .html URL on the host, item {url, title}"
            )
        print(
            f"\n== {what}; {args.concurrency} requests in flight (also per host), "
            f"{args.retries} retries ==",
            flush=True,
        )
        first: tuple[str, set[tuple[str, str]]] | None = None
        runs: list[dict[str, Any]] = []
        for number in range(repeat):
            shift = number % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                row, items = run_crawl(
                    contender,
                    site=site,
                    start_url=start_url,
                    scratch=scratch,
                    args=args,
                    server=server,
                )
                row["repeat"] = number
                runs.append(row)
                print(
                    f"  {LABELS[contender]:<20} {row['pages']:>7,} pages "
                    f"{row['pages_per_second']:>7,.0f} pages/s {row['seconds']:>7.2f} s  "
                    f"(CPU user {row['client_user_seconds']:.1f} s, sys "
                    f"{row['client_sys_seconds']:.1f} s; {row['cpu_ms_per_page']:.2f} ms/page)",
                    flush=True,
                )
                if expected is not None:
                    _same_items(items, expected, contender, "the reachable pages")
                elif first is None:
                    first = (contender, items)
                else:
                    _same_items(items, first[1], contender, f"{LABELS[first[0]]}'s items")
                if row["exported_lines"] != row["exported_unique"]:
                    raise RuntimeError(
                        f"{contender}: {row['exported_lines']:,} lines exported for "
                        f"{row['exported_unique']:,} distinct items"
                    )
    summary = {}
    for contender in contenders:
        mine = [r for r in runs if r["contender"] == contender]
        summary[contender] = {
            key: round(median([r[key] for r in mine if r.get(key) is not None]), 3)
            for key in MEDIAN_KEYS
            if any(r.get(key) is not None for r in mine)
        }
        summary[contender]["runs"] = len(mine)
    part: dict[str, Any] = {
        "part": site,
        "what": what,
        "concurrency": args.concurrency,
        "retries": args.retries,
        "items": len(expected if expected is not None else first[1] if first else ()),
        "runs": runs,
        "median": summary,
        "ratios": ratios(summary),
    }
    if site == "plain":
        part["pages"] = args.pages
    else:
        part["docs_html_files"] = len(docs_pages())
    return part


def _same_items(
    items: set[tuple[str, str]], expected: set[tuple[str, str]], contender: str, what: str
) -> None:
    if items == expected:
        return
    missing, extra = sorted(expected - items), sorted(items - expected)
    raise RuntimeError(
        f"{contender}: its items are not {what}: {len(missing):,} missing (e.g. "
        f"{missing[:3]}), {len(extra):,} not expected (e.g. {extra[:3]})"
    )


MEDIAN_KEYS = (
    "pages",
    "items",
    "seconds",
    "in_run_seconds",
    "pages_per_second",
    "in_run_pages_per_second",
    "client_user_seconds",
    "client_sys_seconds",
    "cpu_ms_per_page",
    "pages_per_cpu_second",
    "peak_rss_mb",
    "server_cpu_share",
    "server_fetches",
)


def ratios(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """scrapeflow's figures over Scrapy's (when both ran)."""
    if not {"scrapeflow", "scrapy"} <= set(summary):
        return {}
    mine, theirs = summary["scrapeflow"], summary["scrapy"]
    return {
        key: round(mine[key] / theirs[key], 3)
        for key in ("pages_per_cpu_second", "pages_per_second", "in_run_pages_per_second")
    } | {"peak_rss": round(mine["peak_rss_mb"] / theirs["peak_rss_mb"], 3)}


def resume_part(
    *, args: argparse.Namespace, scratch: Path, contenders: tuple[str, ...]
) -> dict[str, Any]:
    """Each contender's crawl killed (SIGKILL) halfway, then run again with the same state."""
    pages = args.resume_pages
    with CountingServer(pages=pages) as server:
        expected = plain_items(server.url, pages)
        kill_at = len(expected) // 2
        print(
            f"\n== resume after kill -9: the plain site, {pages:,} pages ({len(expected):,} "
            f"reachable); SIGKILL once {kill_at:,} items are exported, then the same crawl "
            f"again, at most {args.resume_timeout:g} s ==",
            flush=True,
        )
        rows = []
        for contender in contenders:
            rows.append(
                resume_one(
                    contender,
                    server=server,
                    expected=expected,
                    kill_at=kill_at,
                    args=args,
                    scratch=scratch,
                )
            )
    return {
        "part": "resume",
        "pages": pages,
        "reachable": len(expected),
        "kill_at_items": kill_at,
        "concurrency": args.concurrency,
        "timeout_seconds": args.resume_timeout,
        "runs": rows,
    }


# The lines of a resumed run's log worth keeping: Scrapy's "Resuming crawl", errors, warnings.
_NOTABLE = re.compile(r"Resuming|ERROR|CRITICAL|WARNING|Traceback|\"level\": \"(warning|error)")


def resume_one(
    contender: str,
    *,
    server: CountingServer,
    expected: set[tuple[str, str]],
    kill_at: int,
    args: argparse.Namespace,
    scratch: Path,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"{contender}-resume-", dir=scratch)).resolve()
    export = work / "items.jsonl"
    command = contender_command(
        contender,
        site="plain",
        start_url=f"{server.url}/page/0",
        state=work / "state",
        export=export,
        concurrency=args.concurrency,
        retries=args.retries,
        jobdir=True,
    )
    try:
        before = server.hits()
        first = run_process(
            command, cwd=work, server_pid=server.pid, kill_at=kill_at, export=export
        )
        if not first["killed"]:
            raise RuntimeError(
                f"{contender} ended ({first['returncode']}) before {kill_at:,} items were "
                f"exported ({first['lines_at_kill']}): nothing to resume\n"
                f"{first['stderr'][-2000:]}"
            )
        time.sleep(0.5)  # the requests the killed client had sent are served by now
        at_kill = server.hits()
        exported_at_kill, broken_at_kill = read_export(export)
        second = run_process(command, cwd=work, server_pid=server.pid, timeout=args.resume_timeout)
        after = server.hits()
        listed, broken = read_export(export)
        report: dict[str, Any] | None = None
        lines = second["stdout"].strip().splitlines()
        with contextlib.suppress(ValueError, IndexError):
            report = json.loads(lines[-1])
        stderr_tail = second["stderr"][-3000:]
        said = [line[:300] for line in second["stderr"].splitlines() if _NOTABLE.search(line)][:12]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run1, run2 = served_delta(at_kill, before), served_delta(after, at_kill)
    both = served_delta(after, before)
    fetches = sum(both.values())
    items = set(listed)
    finished = second["returncode"] == 0 and not second["timed_out"]
    row: dict[str, Any] = {
        "contender": contender,
        "killed_at_lines": first["lines_at_kill"],
        "killed_after_seconds": round(first["seconds"], 2),
        "export_at_kill": len(exported_at_kill),
        "export_broken_at_kill": broken_at_kill,
        "fetches_run1": sum(run1.values()),
        "fetches_run2": sum(run2.values()),
        "fetches_total": fetches,
        "pages_fetched": len(both),
        "refetched": fetches - len(both),
        "fetched_in_both_runs": len(set(run1) & set(run2)),
        "never_fetched": len({urlsplit(url).path for url, _ in expected} - set(both)),
        "export_lines": len(listed) + broken,
        "export_broken_lines": broken,
        "export_unique_items": len(items & expected),
        "missing_items": len(expected - items),
        "duplicated_items": len(listed) - len(items),
        "unexpected_items": len(items - expected),
        "resumed_finished": finished,
        "resumed_returncode": second["returncode"],
        "resumed_timed_out": second["timed_out"],
        "resumed_seconds": round(second["seconds"], 2),
        "resumed_cpu_seconds": round(
            second["client_user_seconds"] + second["client_sys_seconds"], 2
        ),
        "complete": finished and items == expected and len(listed) == len(items) and not broken,
        "resumed_report": report,
        "resumed_log": said,
    }
    if not finished:
        row["resumed_stderr_tail"] = stderr_tail
    print(
        f"  {LABELS[contender]:<20} killed at {row['killed_at_lines']:,} items "
        f"({row['killed_after_seconds']:.1f} s); fetches {row['fetches_run1']:,} + "
        f"{row['fetches_run2']:,} for {row['pages_fetched']:,} pages ({row['refetched']:,} "
        f"again); export {row['export_lines']:,} lines: {row['missing_items']:,} missing, "
        f"{row['duplicated_items']:,} twice, {row['export_broken_lines']} cut; resumed run "
        + (
            "finished"
            if finished
            else f"did NOT finish (exit {second['returncode']}"
            + (", timed out" if second["timed_out"] else "")
            + ")"
        ),
        flush=True,
    )
    return row


# --- printing -----------------------------------------------------------------------------------


def print_part(part: dict[str, Any]) -> None:
    print(f"\n{part['what']}; {part['concurrency']} in flight; medians of the runs in 'n':")
    header = (
        f"  {'contender':<20} {'n':>2} {'pages':>7} {'items':>7} {'seconds':>8} {'pages/s':>8} "
        f"{'in-run p/s':>10} {'CPU user/sys s':>14} {'CPU ms/page':>11} {'pages/CPU s':>11} "
        f"{'peak RSS MB':>11} {'server CPU':>10}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for contender, row in part["median"].items():
        cpu = f"{row['client_user_seconds']:.1f}/{row['client_sys_seconds']:.1f}"
        print(
            f"  {LABELS[contender]:<20} {row['runs']:>2} {row['pages']:>7,.0f} "
            f"{row['items']:>7,.0f} {row['seconds']:>8.2f} {row['pages_per_second']:>8,.0f} "
            f"{row['in_run_pages_per_second']:>10,.0f} {cpu:>14} {row['cpu_ms_per_page']:>11.2f} "
            f"{row['pages_per_cpu_second']:>11,.0f} {row['peak_rss_mb']:>11.1f} "
            f"{row['server_cpu_share']:>10.0%}"
        )
    fetched = {
        c: row["server_fetches"] for c, row in part["median"].items() if "server_fetches" in row
    }
    if fetched:
        shown = ", ".join(f"{LABELS[c]} {n:,.0f}" for c, n in fetched.items())
        print(f"  pages served to each (counted by the server): {shown}")
    r = part["ratios"]
    if not r:
        return
    verdict = {True: "MET", False: "NOT MET"}
    cpu, wall = r["pages_per_cpu_second"], r["pages_per_second"]
    print(
        f"  scrapeflow / Scrapy: pages per CPU second {cpu:.2f}x (goal >= {CPU_GOAL:g}x: "
        f"{verdict[cpu >= CPU_GOAL]}); pages per wall second {wall:.2f}x (goal >= "
        f"{WALL_GOAL:g}x: {verdict[wall >= WALL_GOAL]}; in-run "
        f"{r['in_run_pages_per_second']:.2f}x); peak RSS {r['peak_rss']:.2f}x"
    )


def print_resume(part: dict[str, Any]) -> None:
    print(
        f"\nresume after kill -9: plain site, {part['pages']:,} pages ({part['reachable']:,} "
        f"reachable), killed once {part['kill_at_items']:,} items were exported, then run "
        "again with the same state; fetches counted by the server:"
    )
    header = (
        f"  {'contender':<20} {'killed at':>9} {'fetches 1+2':>13} {'pages':>6} "
        f"{'refetched':>9} {'never':>6} {'lines':>6} {'missing':>7} {'twice':>6} {'cut':>4} "
        f"{'resumed run':>14} {'complete':>8}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for row in part["runs"]:
        fetches = f"{row['fetches_run1']:,}+{row['fetches_run2']:,}"
        if row["resumed_finished"]:
            resumed = f"ended {row['resumed_seconds']:.1f} s"
        elif row["resumed_timed_out"]:
            resumed = "TIMED OUT"
        else:
            resumed = f"FAILED ({row['resumed_returncode']})"
        print(
            f"  {LABELS[row['contender']]:<20} {row['killed_at_lines']:>9,} {fetches:>13} "
            f"{row['pages_fetched']:>6,} {row['refetched']:>9,} {row['never_fetched']:>6,} "
            f"{row['export_lines']:>6,} {row['missing_items']:>7,} "
            f"{row['duplicated_items']:>6,} {row['export_broken_lines']:>4} {resumed:>14} "
            f"{'yes' if row['complete'] else 'NO':>8}"
        )
    print(
        "  (killed at: items exported then; pages: distinct pages fetched in both runs; "
        "refetched: fetches - pages; never: reachable pages fetched by neither run; lines: the "
        "export's after the second run; missing: reachable pages without an item; twice: lines "
        "beyond one per item; cut: lines that are not JSON)"
    )


# --- the bench ----------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--pages", type=int, default=20_000, help="the plain site's pages")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--retries", type=int, default=2, help="retries of a request")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender, plain site")
    parser.add_argument("--docs-repeat", type=int, default=3, help="runs per contender, docs")
    parser.add_argument(
        "--resume-pages", type=int, default=5_000, help="the plain site's pages, resume part"
    )
    parser.add_argument(
        "--resume-timeout", type=float, default=180.0, help="seconds for a resumed crawl"
    )
    parser.add_argument(
        "--parts",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(PARTS),
        help=f"the parts to run, comma-separated (of {','.join(PARTS)})",
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(CONTENDERS),
        help=f"the contenders, comma-separated (of {','.join(CONTENDERS)})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a quick look: 2,000 pages, 1,000 in the resume part, one docs run, the docs "
        "part skipped if nginx or the docs are missing",
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=BENCH,
        help="where a temporary directory for the crawls' state and exports is made",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    # A scrapeflow client process:
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--site", choices=["plain", "docs"], help=argparse.SUPPRESS)
    parser.add_argument("--start", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    # The counting server process:
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.resume_pages, args.docs_repeat = 2_000, 1_000, 1
    unknown = sorted(set(args.parts) - set(PARTS)) + sorted(set(args.only) - set(CONTENDERS))
    if unknown or not args.parts or not args.only:
        parser.error(f"unknown parts or contenders {unknown} (parts: {', '.join(PARTS)})")
    if min(args.repeat, args.docs_repeat, args.concurrency) < 1 or args.resume_pages < 100:
        parser.error("repeats and concurrency are at least 1, --resume-pages at least 100")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.serve is not None:
        _serve_counting(args.serve)
        return
    if args.client:
        _client_main(args)
        return
    started = time.monotonic()
    parts = [p for p in PARTS if p in args.parts]
    if "docs" in parts and not NginxServer.available():
        if not args.quick:
            sys.exit(
                f"the docs part needs nginx and {DOCS_ROOT} (apt-get install nginx-light "
                "python3-doc), or leave it out: --parts plain,resume"
            )
        print(f"(docs part skipped: no nginx or no {DOCS_ROOT})")
        parts.remove("docs")
    contenders = tuple(c for c in CONTENDERS if c in args.only)
    machine = machine_info()
    # The machine may be shared: the load when the bench started and ended is kept with it.
    load = [round(x, 2) for x in os.getloadavg()]
    print(
        f"crawl bench, {machine['date']}: {machine['nproc']} cores ({machine['cpu']}), Python "
        f"{machine['python']}, commit {machine['git_commit'] or '?'}",
        flush=True,
    )
    scrapy: dict[str, Any] = {"scrapy": "not run", "venv_made": False, "setup_seconds": 0.0}
    if "scrapy" in contenders:
        scrapy = ensure_scrapy_venv()
    print(
        f"Scrapy {scrapy['scrapy']} in {SCRAPY_VENV.relative_to(REPO)}: CrawlSpider, one "
        "Rule(LinkExtractor, callback, follow=True); CONCURRENT_REQUESTS = "
        "CONCURRENT_REQUESTS_PER_DOMAIN = the concurrency; ROBOTSTXT_OBEY False, cookies off, "
        "RETRY_TIMES = the retries, LOG_LEVEL INFO, AsyncioSelectorReactor, FEEDS jsonlines\n"
        "scrapeflow: Crawler(Router, directory, CrawlConfig(concurrency, per_host = the "
        "concurrency, obey_robots=False, retries), exports=[items.jsonl]), LOG_LEVEL INFO\n"
        "seconds: process wall time, start to exit; in-run: the contender's own timer; CPU: "
        "the contender's process; server CPU: share of the wall time",
        flush=True,
    )
    results: dict[str, Any] = {
        "bench": "crawl",
        "machine": machine,
        "options": {
            name: str(value) if isinstance(value, Path) else value
            for name, value in vars(args).items()
            if name not in {"client", "site", "start", "dir", "export", "serve"}
        },
        "scrapy": {
            **scrapy,
            "setup_seconds": round(scrapy["setup_seconds"], 1),
            "reactor": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
            "settings": "CrawlSpider with one Rule(LinkExtractor(...), callback, follow=True); "
            "CONCURRENT_REQUESTS and CONCURRENT_REQUESTS_PER_DOMAIN = concurrency, "
            "DOWNLOAD_DELAY 0, ROBOTSTXT_OBEY False, COOKIES_ENABLED False, RETRY_TIMES = "
            "retries, TELNETCONSOLE_ENABLED False, LOG_LEVEL INFO, FEEDS jsonlines "
            "(FEED_EXPORT_ENCODING utf-8); JOBDIR in the resume part",
        },
        "scrapeflow": "scrapeflow.crawl: Router with a default handler (enqueue_links, one "
        "item), Crawler(directory, CrawlConfig(concurrency, per_host=concurrency, "
        "obey_robots=False, retries), exports=[items.jsonl]), asyncio.run",
    }
    args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="crawl-bench-", dir=args.scratch)).resolve()
    results["scratch"] = {"path": str(scratch), "filesystem": filesystem_of(scratch)}
    done: list[dict[str, Any]] = []
    try:
        for name in parts:
            if name == "resume":
                done.append(resume_part(args=args, scratch=scratch, contenders=contenders))
            else:
                done.append(crawl_part(name, args=args, scratch=scratch, contenders=contenders))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["parts"] = done
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    results["load_average"] = {"start": load, "end": [round(x, 2) for x in os.getloadavg()]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.output.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(results, indent=2) + "\n")
    temporary.replace(args.output)
    print("\n== Results ==")
    for part in done:
        if part["part"] == "resume":
            print_resume(part)
        else:
            print_part(part)
    print(
        f"\nwhole bench: {results['bench_seconds']:.0f} s; load average (1, 5, 15 min) "
        f"{load} at the start, {results['load_average']['end']} at the end; results in "
        f"{_shown(args.output)}"
    )


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()

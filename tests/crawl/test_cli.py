"""``scrapeflow crawl`` and ``scrapeflow shell`` as a user runs them: real processes against the
sandbox's plain site, killed with SIGKILL mid-crawl and run again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from tests._servers import RunningSite
from tests.crawl.test_crawler import reachable

SCRAPEFLOW = [sys.executable, "-m", "scrapeflow"]


def run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPEFLOW, *args], cwd=cwd, capture_output=True, text=True, input=stdin, timeout=120
    )


def crawl_args(url: str, *extra: str) -> list[str]:
    return [
        "crawl",
        f"{url}/page/0",
        "--follow",
        "ul.links a",
        "--item",
        "title=h1::text",
        "--item",
        "url=@url",
        "-o",
        "items.jsonl",
        *extra,
    ]


def test_a_crawl_without_code_killed_five_times_resumes_to_the_same_items_none_twice(
    slow_site: RunningSite, tmp_path: Path
) -> None:
    rng = random.Random(7)
    args = crawl_args(slow_site.url, "--concurrency", "16", "--per-host", "16")
    items = tmp_path / "items.jsonl"
    for _ in range(5):
        before = len(items.read_text().splitlines()) if items.exists() else 0
        process = subprocess.Popen(
            [*SCRAPEFLOW, *args], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # Killed while it crawls: once it has exported something new, at a random instant.
        deadline = time.monotonic() + 60
        while (len(items.read_text().splitlines()) if items.exists() else 0) <= before:
            assert process.poll() is None and time.monotonic() < deadline, "no progress"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    partial = (tmp_path / "items.jsonl").read_text()
    finished = run(*args, cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr

    site = slow_site.site
    every = set(reachable(site, 0))
    lines = (tmp_path / "items.jsonl").read_text().splitlines()
    items = [json.loads(line) for line in lines]
    assert 0 < len(partial.splitlines()) < len(every)  # the kills did land mid-crawl
    assert len(items) == len({i["url"] for i in items}) == len(every)
    assert {(i["url"], i["title"]) for i in items} == {
        (slow_site.page_url(n), site.page_title(n)) for n in every
    }
    fetched = sum(slow_site.hits(f"/page/{n}") for n in every)
    assert fetched - len(every) <= 5 * 16  # only pages in flight at a kill were fetched again


def test_a_spider_module_with_pipelines_exports_parquet(
    plain_site: RunningSite, tmp_path: Path
) -> None:
    (tmp_path / "spider.py").write_text(
        f"""
from scrapeflow.crawl import CrawlConfig, Router

start_urls = ["{plain_site.url}/page/0"]
config = CrawlConfig(max_depth=1)
router = Router()


@router.default_handler
async def listing(response):
    response.enqueue_links("ul.links a", label="detail")


@router.handler("detail")
async def detail(response):
    yield {{"url": response.url, "title": response.css("h1::text").get()}}


def shout(item, response):
    return {{**item, "title": item["title"].upper()}}


pipelines = [shout]
"""
    )
    done = run("crawl", "spider.py", "-o", "items.parquet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(tmp_path / "items.parquet").to_pylist()
    children = set(plain_site.site.page_links(0))
    assert sorted(r["title"] for r in rows) == sorted(
        plain_site.site.page_title(n).upper() for n in children
    )
    assert "pages" in done.stdout and "items.parquet" in done.stdout


def test_depth_same_and_an_error_exit(plain_site: RunningSite, tmp_path: Path) -> None:
    done = run(*crawl_args(plain_site.url, "--depth", "1", "--same", "origin"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "items.jsonl").read_text().splitlines()
    assert len(lines) == len(set(reachable(plain_site.site, 0, depth=1)))

    failed = run("crawl", f"{plain_site.url}/status/500", "--dir", "f", cwd=tmp_path)
    assert failed.returncode == 1
    assert "HTTPStatusError 1" in failed.stdout


def test_bad_input_is_one_line_and_exit_2(plain_site: RunningSite, tmp_path: Path) -> None:
    cases = {
        ("--item", "title"): "an item field is NAME=EXPRESSION",
        ("--item", "t=h1:::text"): "field t: invalid CSS",
        ("--item", "t=@nope"): "unknown '@nope'",
        ("-o", "items.txt"): "cannot tell the export format of items.txt",
        ("--same", "planet"): "--same is hostname, domain, origin or all, got 'planet'",
        ("--depth", "-1"): "max_depth must be >= 0",
    }
    for args, message in cases.items():
        done = run("crawl", f"{plain_site.url}/", *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    missing = run("crawl", "nowhere.py", cwd=tmp_path)
    assert missing.returncode == 2 and "no spider module at nowhere.py" in missing.stderr
    assert not any(p.name.endswith(".crawl") for p in tmp_path.iterdir())


def test_shell_fetches_a_page_for_a_python_prompt(plain_site: RunningSite, tmp_path: Path) -> None:
    url = plain_site.page_url(3)
    done = run(
        "shell",
        url,
        cwd=tmp_path,
        stdin="print(response.status, response.css('h1::text').get())\n"
        "print(fetch(response.urljoin('/page/4')).xpath('//h1/text()').get())\n",
    )
    assert done.returncode == 0, done.stderr
    assert f"200 {plain_site.site.page_title(3)}" in done.stdout
    assert plain_site.site.page_title(4) in done.stdout
    one = run("shell", url, "-c", "print(len(response.links('ul.links a')))", cwd=tmp_path)
    assert one.stdout.strip() == str(len(set(plain_site.site.page_links(3))))


def test_a_spider_modules_config_holds_unless_a_flag_says_otherwise(
    plain_site: RunningSite, tmp_path: Path
) -> None:
    (tmp_path / "echo.py").write_text(
        f"""
from scrapeflow.crawl import CrawlConfig

start_urls = ["{plain_site.url}/echo"]
config = CrawlConfig(user_agent="mybot/1.0", obey_robots=False, max_depth=0)


def parse(response):
    return {{"ua": response.json()["headers"]["User-Agent"]}}
"""
    )
    done = run("crawl", "echo.py", "-o", "a.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"ua": "mybot/1.0"}
    flag = run("crawl", "echo.py", "-o", "b.jsonl", "--user-agent", "other", cwd=tmp_path)
    assert json.loads((tmp_path / "b.jsonl").read_text()) == {"ua": "other"}, flag.stderr
    assert plain_site.hits("/robots.txt") == 0

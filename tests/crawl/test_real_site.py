"""A crawl of a real site: the Python documentation served by nginx. What the crawler finds is
checked against the site's own files, read from disk with the standard library's HTML parser:
every page reachable from the index by its links, each once, with its title."""

from __future__ import annotations

import html
import json
import re
from collections import deque
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from scrapeflow.crawl import CrawlConfig, Crawler, Router
from tests._servers import StaticSite

_LINK = re.compile(r"""<a\s[^>]*?href=["']([^"']+)["']""", re.I)
_TITLE = re.compile(r"<title>(.*?)</title>", re.I | re.S)


def site_truth(root: Path) -> tuple[dict[str, str], set[str]]:
    """Path -> title of every .html page reachable from index.html by <a href> links, read
    with regular expressions (Sphinx writes regular HTML); and the links to missing pages."""
    truth: dict[str, str] = {}
    missing: set[str] = set()
    queue = deque(["/index.html"])
    while queue:
        path = queue.popleft()
        if path in truth or path in missing:
            continue
        file = root / path.lstrip("/")
        if not file.is_file():
            missing.add(path)
            continue
        text = file.read_text(encoding="utf-8")
        title = _TITLE.search(text)
        truth[path] = html.unescape(title.group(1)).strip() if title else ""
        for href in _LINK.findall(text):
            href = html.unescape(href)
            target = urlsplit(urljoin("http://x" + path, href))
            if target.netloc == "x" and target.path.endswith(".html"):
                queue.append(target.path)
    return truth, missing


async def test_the_python_docs_crawled_from_their_index_give_every_page_once(
    nginx_docs: StaticSite, tmp_path: Path
) -> None:
    router = Router()

    @router.default_handler
    async def page(response):  # type: ignore[no-untyped-def]
        response.enqueue_links("a", include=[re.compile(r"\.html$")])
        yield {"url": response.url, "title": (response.css("title::text").get() or "").strip()}

    crawler = Crawler(
        router,
        tmp_path / "crawl",
        config=CrawlConfig(concurrency=16, per_host=16),
        exports=[tmp_path / "docs.jsonl"],
    )
    summary = await crawler.run([f"{nginx_docs.url}/index.html"])

    truth, missing = site_truth(nginx_docs.root)
    assert len(truth) > 400
    items = [json.loads(line) for line in (tmp_path / "docs.jsonl").read_text().splitlines()]
    found = {urlsplit(i["url"]).path: i["title"] for i in items}
    assert len(items) == len(found)  # once each
    assert found == truth
    assert summary.pages == len(truth)
    assert summary.errors == ({"HTTPStatusError": len(missing)} if missing else {})

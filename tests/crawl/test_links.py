"""Link resolution and link rules without a server: every join equals urllib's."""

from __future__ import annotations

import re
from urllib.parse import urljoin

import pytest

from scrapeflow.crawl import Request, canonical_url, fingerprint
from scrapeflow.crawl._links import LinkFilter, compile_patterns
from scrapeflow.crawl._response import _Joiner

BASES = [
    "http://h:1/a/b/c.html",
    "http://h:1/",
    "http://h:1",
    "http://h:1/a/b/",
    "http://h:1/a/b/c.html?x=1#f",
    "https://h.example/x/y",
    "http://h:1?from=/docs/",
    "http://h:1#x/y",
    "http://h:1/a?b=/c/d#e/f",
]
HREFS = [
    "d.html", "../d.html", "../../../d.html", "./d.html", "/d.html", "/a/./b/../c", "d/../e/",
    ".", "..", "./", "../", "d.html?q=1/../x", "d.html#frag", "?q=2", "#top", "//other/x",
    "mailto:x", "HTTP://H/x", "http://x/y", "a:b/c", "d/e/..", "d/e/.", "/..", "/../x",
    "x/..?y", "%2e%2e/x", "a..b/c", ".hidden/x", "..x/y", "c?", "c?#f", "/c?", "",
]  # fmt: skip


@pytest.mark.parametrize("base", BASES)
def test_joining_a_link_gives_what_urllib_gives(base: str) -> None:
    join = _Joiner(base)
    assert [join(h) for h in HREFS] == [urljoin(base, h) for h in HREFS]


def test_fingerprints_ignore_what_does_not_change_the_resource() -> None:
    assert canonical_url("http://a.test/p?b=2&a=1#x") == "http://a.test/p?a=1&b=2"
    assert fingerprint("http://a.test/p?b=2&a=1") == fingerprint("http://a.test/p?a=1&b=2#y")
    assert fingerprint("http://a.test/p") != fingerprint("http://a.test/p", "POST")
    assert fingerprint("http://a.test/p", "POST", "x=1") != fingerprint("http://a.test/p", "POST")
    assert Request("http://a.test/%7Euser").key == Request("http://a.test/~user").key


def test_globs_match_the_whole_url() -> None:
    (glob,) = compile_patterns(["http://a.test/docs/*.html"])
    assert glob.search("http://a.test/docs/x.html")
    assert not glob.search("http://a.test/docs/sub/x.html")  # * stops at /
    assert not glob.search("http://a.test/docs/x.html?y")
    (deep,) = compile_patterns(["http://a.test/**"])
    assert deep.search("http://a.test/docs/sub/x.html")
    rules = LinkFilter("all", include=compile_patterns([re.compile(r"\.html$")]))
    assert rules.keeps("http://b.test/x.html", "http://a.test/")
    assert not rules.keeps("http://b.test/x.pdf", "http://a.test/")

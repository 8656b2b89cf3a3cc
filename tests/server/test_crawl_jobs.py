"""``POST /v1/jobs`` with ``kind: crawl``: a crawl without code, run by the service or by a
worker (its frontier then in PostgreSQL), its pages and items read through the results."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeflow.sandbox import Sandbox
from tests._servers import RunningSite
from tests.crawl.test_crawler import reachable

from .conftest import Service
from .test_jobs_api import all_results, jobs_service, problem, wait_ended


@pytest.fixture
def crawl_service(
    request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox, job_backend: str
) -> Iterator[Service]:
    with jobs_service(request, tmp_path, sandbox, job_backend) as running:
        yield running


def test_a_crawl_job_follows_links_and_lists_each_page_with_its_items(
    crawl_service: Service, plain_site: RunningSite
) -> None:
    params = {
        "start_urls": [plain_site.page_url(0)],
        "follow": ["ul.links a"],
        "items": ["title=h1::text", "url=@url", "links=all:ul.links a::attr(href)"],
        "max_depth": 1,
    }
    with crawl_service.client("jobs", "read") as client:
        created = client.post("/v1/jobs", json={"kind": "crawl", "params": params})
        assert created.status_code == 202, created.text
        assert created.json()["params"]["max_requests"] == 1_000  # the defaults, shown
        job = wait_ended(client, created.json()["id"])
        assert job["state"] == "succeeded", job
        pages = all_results(client, job["id"], limit=4)

    site = plain_site.site
    expected = reachable(site, 0, depth=1)
    assert job["result"]["pages"] == len(expected) and job["result"]["errors"] == {}
    assert len(pages) == len(expected)
    assert [p["index"] for p in pages] == list(range(len(expected)))
    for page in pages:
        n = int(page["url"].rsplit("/", 1)[1])
        assert page["state"] == "succeeded" and page["status"] == 200
        assert page["depth"] == expected[n]
        assert page["items"] == [
            {
                "title": site.page_title(n),
                "url": plain_site.page_url(n),
                "links": [f"/page/{m}" for m in site.page_links(n)],
            }
        ]
    assert all(plain_site.hits(f"/page/{n}") == 1 for n in expected)


def test_bad_crawl_jobs_are_refused_and_need_the_jobs_scope(
    crawl_service: Service, plain_site: RunningSite
) -> None:
    start = [plain_site.page_url(0)]
    with crawl_service.client("jobs", "read") as client:
        for params, where in [
            ({"start_urls": start, "items": ["t=h1:::text"]}, "field t: invalid CSS"),
            ({"start_urls": start, "follow": ["ul >>> a"]}, "--follow: invalid CSS"),
            ({"start_urls": start, "items": ["title"]}, "NAME=EXPRESSION"),
            ({"start_urls": start, "max_requests": 100_001}, "max_requests"),
            ({"start_urls": start, "strategy": "planet"}, "strategy"),
            ({"start_urls": []}, "start_urls"),
            ({"start_urls": start, "code": "import os"}, "code"),
            ({"start_urls": start, "items": ["t=xpath://h1/text()"]}, "XPath fields"),
            ({"start_urls": start, "include": ["http*a*a*a*a*b"]}, "at most 4"),
        ]:
            answer = client.post("/v1/jobs", json={"kind": "crawl", "params": params})
            body = problem(answer, 422, answer.json().get("type", ""))
            assert where in answer.text, (params, body)
        blocked = client.post(
            "/v1/jobs", json={"kind": "crawl", "params": {"start_urls": ["http://10.1.2.3/"]}}
        )
        problem(blocked, 422, "egress-blocked")
        assert client.get("/v1/jobs", params={"kind": "crawl"}).json()["jobs"] == []
    with crawl_service.client("read") as reader:
        refused = reader.post("/v1/jobs", json={"kind": "crawl", "params": {"start_urls": start}})
        problem(refused, 403, "forbidden")

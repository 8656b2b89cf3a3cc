"""``scrapeflow crawl`` (a site, with or without code) and ``scrapeflow shell`` (one page, at a
Python prompt)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from scrapeflow.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    err,
    fail,
    input_errors,
    out,
    run_async,
    settings,
)

if TYPE_CHECKING:
    from scrapeflow.crawl import Crawler

__all__ = ["crawl", "shell"]


def crawl(
    ctx: typer.Context,
    target: Annotated[
        str, typer.Argument(help="A start URL, or a Python file of handlers (a spider module).")
    ],
    urls: Annotated[
        list[str] | None, typer.Argument(help="More start URLs (a module's replace its own).")
    ] = None,
    output: Annotated[
        list[Path] | None,
        typer.Option("-o", "--output", help="Export items to .jsonl, .csv or .parquet (repeat)."),
    ] = None,
    follow: Annotated[
        list[str] | None, typer.Option(help="Follow the links this CSS selector picks (repeat).")
    ] = None,
    item: Annotated[
        list[str] | None,
        typer.Option(help="An item field NAME=EXPR: CSS, 'all:CSS', 'xpath:…', @url (repeat)."),
    ] = None,
    depth: Annotated[
        int | None, typer.Option(help="Links followed from a start URL at most.")
    ] = None,
    same: Annotated[
        str | None,
        typer.Option(
            help="Follow links to the same hostname, domain or origin, or all.",
            show_default="hostname",
        ),
    ] = None,
    include: Annotated[
        list[str] | None, typer.Option(help="Follow only URLs matching this glob (repeat).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="Never follow URLs matching this glob (repeat).")
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(help="Requests in the whole crawl at most.")
    ] = None,
    allowed_domain: Annotated[
        list[str] | None, typer.Option(help="Stay on this domain and its subdomains (repeat).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Pages fetched at once.", show_default="32")
    ] = None,
    per_host: Annotated[
        int | None, typer.Option(help="Requests in flight per host.", show_default="8")
    ] = None,
    delay: Annotated[
        float | None, typer.Option(help="Seconds between requests to a host.", show_default="0")
    ] = None,
    autothrottle: Annotated[
        float | None, typer.Option(help="Adapt delays to aim at this many requests per host.")
    ] = None,
    sitemap: Annotated[
        list[str] | None, typer.Option(help="Also crawl the pages of this sitemap (repeat).")
    ] = None,
    sitemaps_from_robots: Annotated[
        bool, typer.Option(help="Also crawl the sitemaps robots.txt lists.")
    ] = False,
    ignore_robots: Annotated[
        bool, typer.Option(help="Fetch what robots.txt disallows (off: it is obeyed).")
    ] = False,
    user_agent: Annotated[
        str | None,
        typer.Option(
            help="User-Agent sent, and the name robots.txt rules are read for.",
            show_default="scrapeflow",
        ),
    ] = None,
    strict: Annotated[bool, typer.Option(help="A handler's exception stops the crawl.")] = False,
    dir: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="The crawl's state (resume by running again): default OUTPUT.crawl."
        ),
    ] = None,
) -> None:
    """Crawl a site from TARGET, following links, exporting items; run again to resume.

    Without code: scrapeflow crawl URL --follow 'ul.links a' --item title='h1::text'
    --item url=@url -o items.jsonl. With a module of handlers (it defines `router`, or a
    `parse(response)` function, and may define `start_urls`, `config`, `pipelines` and
    `item_model`): scrapeflow crawl spider.py -o items.parquet.
    """
    settings(ctx)
    from scrapeflow.crawl import (
        AutoThrottle,
        CrawlConfig,
        Crawler,
        CrawlSpec,
        Router,
    )

    with input_errors():
        module = _spider(target) if target.endswith(".py") else None
        starts = list(urls or [])
        if module is None:
            starts.insert(0, target)
            spec = CrawlSpec.parse(follow or [], item or [])
            router: Router = spec.router()
            base = CrawlConfig()
            pipelines: list[Any] = []
            model = None
        else:
            if follow or item:
                fail("--follow and --item are for crawls without code; a module has handlers")
            router = _module_router(module, target)
            starts = starts or list(getattr(module, "start_urls", []))
            base = getattr(module, "config", None) or CrawlConfig()
            if not isinstance(base, CrawlConfig):
                fail(f"{target}: config is a {type(base).__name__}, not a CrawlConfig")
            pipelines = list(getattr(module, "pipelines", []))
            model = getattr(module, "item_model", None)
        if not starts and not sitemap:
            fail("no start URL: give one, or start_urls in the module, or --sitemap")
        if same not in (None, "hostname", "domain", "origin", "all"):
            fail(f"--same is hostname, domain, origin or all, got {same!r}")
        strategy = None if same is None else "all" if same == "all" else f"same-{same}"
        # The module's config, with what the command line gives over it.
        given: dict[str, Any] = {
            "max_depth": depth,
            "max_requests": max_requests,
            "allowed_domains": tuple(allowed_domain) if allowed_domain else None,
            "strategy": strategy,
            "concurrency": concurrency,
            "per_host": per_host,
            "delay": delay,
            "obey_robots": False if ignore_robots else None,
            "user_agent": user_agent,
            "autothrottle": AutoThrottle(autothrottle) if autothrottle else None,
            "strict": True if strict else None,
            "include": tuple(include) if include else None,
            "exclude": tuple(exclude) if exclude else None,
        }
        config = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
        outputs = list(output or [])
        directory = dir or (
            outputs[0].with_name(outputs[0].name + ".crawl") if outputs else Path("crawl")
        )
        crawler = Crawler(
            router,
            directory,
            config=config,
            exports=outputs,
            pipelines=pipelines,
            item_model=model,
        )
    summary = _run(crawler, starts, sitemap or [], sitemaps_from_robots)
    out.print(Text(str(summary)))
    for path in outputs:
        out.print(Text(f"items in {path}"))
    out.print(Text(f"crawl state in {directory} (run the same command to resume)"))
    raise typer.Exit(EXIT_FAILED if summary.failed else 0)


def _run(crawler: Crawler, starts: list[str], sitemaps: list[str], from_robots: bool) -> Any:
    from scrapeflow.cli._display import RunDisplay

    try:
        with RunDisplay(err, None, "crawl") as display, input_errors():
            return run_async(
                crawler.run(
                    starts,
                    sitemaps=sitemaps,
                    sitemaps_from_robots=from_robots,
                    on_progress=display.update,
                )
            )
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/] finished pages are saved; run the same command to resume"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _spider(path: str) -> Any:
    from scrapeflow.errors import InputError

    file = Path(path)
    if not file.is_file():
        raise InputError(f"no spider module at {path}")
    spec = importlib.util.spec_from_file_location(f"scrapeflow_spider_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise InputError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _module_router(module: Any, path: str) -> Any:
    from scrapeflow.crawl import Router
    from scrapeflow.errors import InputError

    router = getattr(module, "router", None)
    if isinstance(router, Router):
        return router
    parse = getattr(module, "parse", None)
    if callable(parse):
        return Router.of(parse)
    raise InputError(f"{path} defines neither a Router named 'router' nor a parse(response)")


def shell(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="The page to fetch.")],
    user_agent: Annotated[str, typer.Option(help="User-Agent sent.")] = "scrapeflow",
    command: Annotated[
        str | None, typer.Option("-c", "--command", help="Run this Python code, not a prompt.")
    ] = None,
) -> None:
    """Fetch URL and open a Python prompt with `response` (its css(), xpath(), text…), as
    `scrapy shell` does; `fetch(url)` gets another page."""
    settings(ctx)
    import asyncio
    import code

    from scrapeflow.crawl import Request, Response
    from scrapeflow.http import HttpClient, HttpConfig

    loop = asyncio.new_event_loop()
    client = HttpClient(HttpConfig(max_connections=4, identities="none"))
    loop.run_until_complete(client.__aenter__())

    def fetch(address: str) -> Response:
        request = Request(address)
        answer = loop.run_until_complete(
            client.request("GET", address, headers={"User-Agent": user_agent})
        )
        return Response(request, answer)

    try:
        with input_errors():
            response = fetch(url)
        names = {"response": response, "fetch": fetch, "Request": Request}
        banner = (
            f"{response!r}\nresponse.css(...), response.xpath(...), response.text, "
            "fetch(url); Ctrl-D to leave"
        )
        if command is not None:
            exec(compile(command, "<command>", "exec"), names)  # noqa: S102 - the user's own
        else:
            code.interact(banner=banner, local=names, exitmsg="")
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()

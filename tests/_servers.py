"""Real servers on loopback for every test package (a pytest plugin, see ``tests/conftest.py``).

* ``plain_site``, ``slow_site``: the sandbox plain site, served from a thread;
* ``sandbox``: the whole sandbox (plain site, feed, three banks);
* ``s3_endpoint`` (moto's S3 server, one per session, with S3's atomic conditional writes),
  ``target`` / ``s3_target`` (a store on local disk or in a fresh bucket) and ``aws_sandbox``
  (no AWS settings from the machine);
* ``redis_stream``: the machine's Redis;
* ``nginx_docs``: nginx serving Debian's Python documentation (a real site of ~500 pages).

A server that must be on the machine (Redis, PostgreSQL, tinyproxy) and is not: the test is
skipped, or fails under ``CI=true``, where it must be there (:func:`unavailable`).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from scrapeflow.sandbox import PlainSite, Sandbox, SandboxConfig, SiteConfig, serve_in_thread
from tests._s3 import Target, local_target, make_s3_target

__all__ = ["REDIS_URL", "RunningSite", "unavailable"]

REDIS_URL = "redis://127.0.0.1:6379/0"
NGINX = Path("/usr/sbin/nginx")
PYTHON_DOCS = Path("/usr/share/doc/python3-doc/html")


def unavailable(message: str) -> NoReturn:
    """A server the test needs is missing: fail under ``CI=true``, skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class RunningSite:
    site: PlainSite
    url: str

    def page_url(self, n: int) -> str:
        return f"{self.url}/page/{n}"

    def hits(self, path: str) -> int:
        return self.site.hits[path]


@pytest.fixture
def plain_site() -> Iterator[RunningSite]:
    """The sandbox plain site (1,000 pages, no latency), served from its own thread."""
    site = PlainSite(SiteConfig(pages=1000))
    with serve_in_thread(site.app) as url:
        yield RunningSite(site, url)


@pytest.fixture
def slow_site() -> Iterator[RunningSite]:
    """The plain site with 20-60 ms per response, so a run can be stopped halfway."""
    site = PlainSite(SiteConfig(pages=1000, latency_ms=(20.0, 60.0)))
    with serve_in_thread(site.app) as url:
        yield RunningSite(site, url)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A fresh sandbox (no hostility, 0-2 ms latency, its clock at the epoch) in a thread."""
    config = SandboxConfig(hostility="none", latency_ms=(0, 2), customers=1000)
    with Sandbox.in_thread(config) as running:
        yield running


@pytest.fixture
def aws_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS settings from the machine; dummy credentials; no instance-metadata lookups; the
    default spool directory inside the test's tmp_path."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


class _AtomicConditionalWrites:
    """A WSGI wrapper that runs moto's conditional PUTs one at a time.

    moto checks ``If-None-Match: *`` / ``If-Match`` and then writes, and its threaded server
    lets another request run in between: two writers of one key could both be told "created"
    (the fetcher then counts a duplicate as stored), which S3 never does. Under load, as with
    one pytest-xdist worker per core, that happened. One lock makes check and write one step.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        if environ.get("REQUEST_METHOD") != "PUT" or not conditional:
            return self._app(environ, start_response)
        with self._lock:
            return list(self._app(environ, start_response))  # the whole response, locked


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, a free port, for the whole session. Nothing reaches AWS."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = _AtomicConditionalWrites(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The store's location: a directory, or a fresh bucket with a prefix on the S3 server."""
    if request.param == "local":
        return local_target(tmp_path / "store")
    return make_s3_target(request.getfixturevalue("s3_endpoint"))


@pytest.fixture
def s3_target(s3_endpoint: str) -> Target:
    """A fresh bucket on the S3 server, for behaviours only S3 has (spooling, compaction)."""
    return make_s3_target(s3_endpoint)


@pytest.fixture
def redis_stream() -> Iterator[redis.Redis]:
    """A client of the machine's Redis at :data:`REDIS_URL`."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        client.close()
        unavailable("Redis is not running on 127.0.0.1:6379")
    yield client
    client.close()


async def add_sandbox_customers(
    sandbox: Sandbox,
    db_url: str,
    vault_key: str,
    numbers: Iterable[int],
    banks: Iterable[str] = ("formbank", "apibank", "legacybank"),
) -> None:
    """Customers ``cust-N`` (of a migrated database), each with an access at each of ``banks``
    holding the sandbox's credentials for its customer N, sealed with ``vault_key``."""
    from scrapeflow.banking import CredentialVault, add_access, add_customer
    from scrapeflow.db import create_engine, session_factory
    from scrapeflow.sandbox import SandboxAdmin

    vault = CredentialVault([vault_key])
    engine = create_engine(db_url)
    try:
        sessions = session_factory(engine)
        async with SandboxAdmin.from_sandbox(sandbox) as admin:
            for n in numbers:
                await add_customer(sessions, f"cust-{n}", f"Customer {n}")
                for bank in banks:
                    login = await admin.customer(bank, n)
                    await add_access(
                        sessions, vault, f"cust-{n}", bank, login["username"], login["password"]
                    )
    finally:
        await engine.dispose()


@dataclass
class StaticSite:
    root: Path
    url: str


@pytest.fixture
def nginx_docs(tmp_path: Path) -> Iterator[StaticSite]:
    """nginx on a free loopback port serving the Python documentation (``python3-doc``, which
    ``scripts/install-system-deps`` installs with nginx), one worker, no access log."""
    if not NGINX.exists() or not (PYTHON_DOCS / "index.html").exists():
        unavailable(f"nginx ({NGINX}) and python3-doc ({PYTHON_DOCS}) are needed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"""daemon off; master_process off; worker_processes 1;
pid {prefix}/nginx.pid; error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off; client_body_temp_path {prefix}; proxy_temp_path {prefix};
  fastcgi_temp_path {prefix}; uwsgi_temp_path {prefix}; scgi_temp_path {prefix};
  types {{ text/html html; text/css css; application/javascript js; }}
  default_type application/octet-stream;
  server {{ listen 127.0.0.1:{port}; root {PYTHON_DOCS.resolve()}; }}
}}
"""
    )
    process = subprocess.Popen([str(NGINX), "-p", str(prefix), "-c", str(conf)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (
                        (prefix / "error.log").read_text()
                        if (prefix / "error.log").exists()
                        else ""
                    )
                    pytest.fail(f"nginx did not start on port {port}: {log[-1000:]}")
                time.sleep(0.05)
        yield StaticSite(PYTHON_DOCS.resolve(), f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)

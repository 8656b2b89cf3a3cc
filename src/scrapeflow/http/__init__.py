"""The HTTP layer every scrapeflow scraper goes through (aiohttp underneath).

* per-host slots with their own concurrency and pacing, adaptive (AIMD) and ``Retry-After``
  aware, under one global cap (:class:`HostPolicy`);
* retries with exponential backoff and jitter, per request and per run (:class:`RetryPolicy`);
* sessions that keep identity, cookies and proxy together, change proxy only after repeated
  failures, and are retired on a ban or a CAPTCHA (:class:`ScrapeSession`);
* coherent browser identities (:data:`IDENTITIES`);
* an egress policy for client-given URLs: which address classes they may reach, checked at
  registration and at dial time (:class:`EgressPolicy`);
* every exchange (request as sent, redirects, answer) told to observers
  (``HttpClient.observers``), and the wire itself replaceable (:class:`Wire`: a recording
  played back);
* stats per host and per proxy (:class:`Stats`), and per host for the whole process
  (:func:`process_traffic`).

>>> from scrapeflow.http import HttpClient, HttpConfig
>>> async with HttpClient(HttpConfig(max_connections=50)) as http:  # doctest: +SKIP
...     response = await http.get("http://127.0.0.1:8080/page/1")
"""

from scrapeflow.http._client import HttpClient, Response
from scrapeflow.http._config import HostPolicy, HttpConfig, RetryPolicy
from scrapeflow.http._egress import (
    EgressPolicy,
    address_class,
    egress_refusal,
    judge_target,
    parse_egress_allow,
)
from scrapeflow.http._exchange import Exchange, Hop, Observer, Wire, request_body, requested_url
from scrapeflow.http._failures import FAILURE_CLASSES, failure_class
from scrapeflow.http._identity import IDENTITIES, Identity, pick_identity
from scrapeflow.http._proxypool import ProxyPool, proxy_label
from scrapeflow.http._session import ScrapeSession
from scrapeflow.http._stats import HostTraffic, Stats, TrafficStats, process_traffic

__all__ = [
    "FAILURE_CLASSES",
    "IDENTITIES",
    "EgressPolicy",
    "Exchange",
    "Hop",
    "HostPolicy",
    "HostTraffic",
    "HttpClient",
    "HttpConfig",
    "Identity",
    "Observer",
    "ProxyPool",
    "Response",
    "RetryPolicy",
    "ScrapeSession",
    "Stats",
    "TrafficStats",
    "Wire",
    "address_class",
    "egress_refusal",
    "failure_class",
    "judge_target",
    "parse_egress_allow",
    "pick_identity",
    "process_traffic",
    "proxy_label",
    "request_body",
    "requested_url",
]

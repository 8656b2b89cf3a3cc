"""A customer's movements as a file through the API, in the command line's formats: the same
movements as the list, the same filters, a name to save it under."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from scrapeflow.sandbox import Sandbox

from .conftest import running_service
from .test_outcomes import refreshed


def listed(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    answer = client.get("/v1/customers/cust-1/movements", params={**params, "limit": 1000})
    assert answer.json()["next_cursor"] is None
    return list(answer.json()["movements"])


def test_movements_are_exported_as_csv_ofx_and_json(tmp_path: Path, sandbox: Sandbox) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    with (
        running_service(tmp_path, sandbox, db_url, customers=[1]) as service,
        service.client("read", "refresh") as client,
    ):
        refreshed(client, "cust-1")
        every = listed(client)
        url = "/v1/customers/cust-1/movements/export"

        answer = client.get(url, params={"format": "csv"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/csv")
        assert answer.headers["content-disposition"] == (
            'attachment; filename="cust-1-movements.csv"'
        )
        rows = list(csv.DictReader(io.StringIO(answer.text)))
        assert len(rows) == len(every) > 0
        assert [(r["key"], Decimal(r["amount"])) for r in rows] == [
            (m["key"], Decimal(m["amount"])) for m in every
        ]

        # An IBAN names one account (a bank ref may be another bank's too).
        account = next(m["account"] for m in every if m["account"].startswith("ES"))
        days = sorted({m["operation_date"] for m in every})
        since, until = days[len(days) // 3], days[2 * len(days) // 3]
        some = listed(client, account=account, since=since, until=until)
        assert 0 < len(some) < len(every)
        filtered = client.get(
            url, params={"format": "json", "account": account, "since": since, "until": until}
        )
        assert filtered.headers["content-type"].startswith("application/json")
        assert [m["key"] for m in json.loads(filtered.text)] == [m["key"] for m in some]

        ofx = client.get(url, params={"format": "ofx", "account": account})
        assert ofx.headers["content-type"].startswith("application/x-ofx")
        document = ET.fromstring(ofx.text[ofx.text.index("<OFX>") :])
        statements = document.findall(".//STMTTRNRS") + document.findall(".//CCSTMTTRNRS")
        assert len(statements) == 1  # the one account asked for
        booked = [m for m in listed(client, account=account) if not m["pending"]]
        assert len(document.findall(".//STMTTRN")) == len(booked)

        # A bank ref names an account at one bank only (formbank's card and an apibank account
        # may share one): the access narrows the list and the file to that bank's.
        shared = next(
            ref
            for ref in {m["account_ref"] for m in every}
            if len({m["access_id"] for m in every if m["account_ref"] == ref}) > 1
        )
        owner = next(m["access_id"] for m in every if m["account_ref"] == shared)
        both = listed(client, account=shared)
        one = listed(client, account=shared, access=owner)
        assert 0 < len(one) < len(both) and {m["access_id"] for m in one} == {owner}
        narrowed = client.get(url, params={"format": "json", "account": shared, "access": owner})
        assert [m["key"] for m in json.loads(narrowed.text)] == [m["key"] for m in one]

        for params, status in (
            ({}, 422),  # the format is required
            ({"format": "pdf"}, 422),
            ({"format": "csv", "since": "2026-02-01", "until": "2026-01-01"}, 422),
            ({"format": "csv", "since": "0"}, 422),
            ({"format": "csv", "access": "0"}, 422),
        ):
            refused = client.get(url, params=params)
            assert refused.status_code == status, (params, refused.text)
            assert refused.headers["content-type"] == "application/problem+json"
        missing = client.get("/v1/customers/nobody/movements/export", params={"format": "csv"})
        assert missing.status_code == 404

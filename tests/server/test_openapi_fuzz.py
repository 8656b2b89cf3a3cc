"""Schemathesis against the service's own OpenAPI description: valid and invalid requests on
every operation, and no answer is a 5xx or breaks the schema the service publishes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import Service

# The checks that hold for any request, valid or not. Left out: the checks that expect a
# request with a made-up id to succeed (positive_data_acceptance, use_after_free and kin):
# unknown ids are 404 here on purpose.
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "missing_required_header",
        "unsupported_method",
    )
)


def test_no_request_the_schema_allows_or_forbids_breaks_the_service(
    service: Service, tmp_path: Path
) -> None:
    key = service.key("admin")
    report = tmp_path / "junit.xml"
    config = tmp_path / "schemathesis.toml"
    # An invalid request may also be too large (413): a refusal all the same.
    config.write_text(
        "[checks.negative_data_rejection]\n"
        "expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]\n"
    )
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(config),
        "run",
        f"{service.url}/openapi.json",
        "--checks",
        CHECKS,
        "--header",
        f"Authorization: Bearer {key}",
        "--max-examples",
        "15",
        "--phases",
        "examples,coverage,fuzzing",
        "--seed",
        "20261124",
        "--generation-deterministic",
        "--request-timeout",
        "20",
        # Event streams never end by design; their auth and errors have their own tests.
        "--exclude-path-regex",
        "/events$",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=420, env=env, check=False, cwd=tmp_path
    )
    code = done.returncode
    # Only the findings: a generated body can be megabytes long.
    findings = [line[:300] for line in done.stdout.splitlines() if line.strip()][-200:]
    assert code == 0, "\n".join(findings).replace(key, "sf_…") + done.stderr[-2000:]
    assert report.exists()

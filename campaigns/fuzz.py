"""Schemathesis against ``/openapi.json``: generated requests (valid and invalid, stateful
sequences too) with a merchant's key -> 0 server errors, every error answer an RFC 9457
``application/problem+json`` (the hook ``schemathesis_hooks.error_is_problem_json``).

Schemathesis runs as its own CLI (``schemathesis run``, all checks), round after round with a
new seed, at least ``min_rounds`` rounds and until the web process has answered
``min_requests`` requests (counted in the web log: one request line, or for a request it does
not cover gunicorn's access line, per request; ADR 0028). Odd rounds generate from the
schema as served, even rounds from the same schema tightened to the API contract (docs/api.md)
(``CAMPAIGN_SCHEMA=contract``), so that generated payments pass validation and reach the
payment flow. Violations: a 5xx other than the API's
designed ``502 acquirer_error`` and ``503 acquirer_unavailable`` (ST101, ST102, or any
500/504 in the web log), and any error answer that is not problem+json. The other
checks' failures (schema conformance, ...) are findings, printed with Schemathesis'
reproduction, not violations.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET  # parses only our own report file
from pathlib import Path

from campaigns.harness import PYTHON, ROOT, CampaignError, CampaignResult, Stack

#: Failure codes that are violations of the campaign (the rest are findings).
VIOLATION_CODES = {"ST101", "ST102"}
CUSTOM_CHECK = "error_is_problem_json"
#: An access-log line's request and status, in a plain line or JSON-escaped in a JSON line's
#: ``event`` (``LOG_FORMAT=json``: the quotes are ``\"``).
ACCESS_LINE = re.compile(
    r'\\?"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS|TRACE|[A-Z]+) \S+ HTTP/[\d.]+\\?" (\d{3}) '
)
#: The request line's message (observability/request_context.py): ``request METHOD route status``.
REQUEST_LINE = re.compile(r"\brequest [A-Z]+ (?:\(no route\)|\S+) (\d{3})\b")
CONFIG = """\
[checks.not_a_server_error]
# 502 acquirer_error and 503 acquirer_unavailable are designed answers (README, API contract).
expected-statuses = ["2xx", "3xx", "4xx", "502", "503"]
"""


def _access_statuses(log: Path, start: int) -> tuple[dict[str, int], int]:
    """Statuses of the requests logged after byte ``start`` (request lines and access lines:
    each request has one of them); and the new end offset."""
    with log.open("rb") as handle:
        handle.seek(start)
        text = handle.read().decode("utf-8", "replace")
        end = handle.tell()
    counts: dict[str, int] = {}
    for pattern in (ACCESS_LINE, REQUEST_LINE):
        for match in pattern.finditer(text):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts, end


def _failures(report: Path) -> list[tuple[str, str, str]]:
    """(operation, codes, text) of each failure in a JUnit report."""
    if not report.exists():
        return []
    tree = ET.parse(report)  # noqa: S314
    found = []
    for case in tree.iter("testcase"):
        for failure in [*case.iter("failure"), *case.iter("error")]:
            found.append((case.get("name", "?"), failure.get("message", ""), failure.text or ""))
    return found


def run(
    stack: Stack,
    *,
    min_requests: int = 10_000,
    max_examples: int = 1500,
    workers: int = 2,
    max_rounds: int = 20,
    min_rounds: int = 2,
) -> CampaignResult:
    result = CampaignResult("schemathesis")
    assert stack.web is not None
    if importlib.util.find_spec("schemathesis") is None:
        raise CampaignError("schemathesis is not installed (pip install 'schemathesis>=4')")
    _, api_key = stack.create_merchant("fuzz")
    out = stack.out_dir / "schemathesis"
    out.mkdir(parents=True, exist_ok=True)
    config = out / "schemathesis.toml"
    config.write_text(CONFIG)
    log = stack.web.log_path
    offset = log.stat().st_size
    statuses: dict[str, int] = {}
    failures: list[tuple[str, str, str]] = []
    rounds = 0
    exit_codes = []
    while rounds < max_rounds and (rounds < min_rounds or sum(statuses.values()) < min_requests):
        rounds += 1
        report = out / f"junit-{rounds}.xml"
        command = [
            PYTHON,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(config),
            "run",
            f"{stack.web.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {api_key}",
            "--checks",
            "all",
            "--max-examples",
            str(max_examples),
            "--workers",
            str(workers),
            "--seed",
            str(rounds),
            "--suppress-health-check",
            "all",
            "--request-timeout",
            "30",
            "--report",
            "junit",
            "--report-junit-path",
            str(report),
            "--no-color",
        ]
        # Odd rounds generate from the served schema, even ones from the API contract (docs/api.md).
        schema = "served" if rounds % 2 else "contract"
        env = {
            **os.environ,
            "SCHEMATHESIS_HOOKS": "campaigns.schemathesis_hooks",
            "PYTHONPATH": str(ROOT),
            "NO_COLOR": "1",
            "CAMPAIGN_SCHEMA": schema,
        }
        with open(out / f"output-{rounds}.txt", "wb") as output:
            # In the output directory: Schemathesis and Hypothesis keep caches in the cwd.
            completed = subprocess.run(  # noqa: S603
                command, cwd=out, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=3600
            )
        exit_codes.append(completed.returncode)
        time.sleep(0.5)  # the line of a request is written after the answer
        counts, offset = _access_statuses(log, offset)
        for status, count in counts.items():
            statuses[status] = statuses.get(status, 0) + count
        failures += _failures(report)

    requests = sum(statuses.values())
    (payments,) = stack.sql(
        "SELECT count(*) FROM payments_payment p JOIN merchants_merchant m "
        "ON m.id = p.merchant_id WHERE m.name LIKE %s",
        [f"fuzz-{stack.tag}"],
    )[0]
    server_errors = {s: n for s, n in statuses.items() if s.startswith("5")}
    unexpected = {s: n for s, n in server_errors.items() if s not in ("502", "503")}
    violations, findings = [], {}
    for operation, codes, text in failures:
        code_set = {c.strip() for c in codes.split(",")}
        lines = [line for line in text.strip().splitlines() if line.strip()]
        curl = next((line.strip() for line in lines if line.strip().startswith("curl ")), "")
        summary = next((line.strip("- ").strip() for line in lines if line.startswith("- ")), codes)
        if code_set & VIOLATION_CODES or CUSTOM_CHECK in text:
            violations.append(f"{operation}: {summary} | {curl}")
        else:
            findings.setdefault(f"{operation}: {summary}", curl)

    result.figures.update(
        {
            "requests (web log)": requests,
            "rounds (seeds)": rounds,
            "answers by status": dict(sorted(statuses.items())),
            "payments created": payments,
            "5xx": server_errors or 0,
            "schemathesis failures (violations / other findings)": (
                f"{len(violations)} / {len(findings)}"
            ),
        }
    )
    for finding, curl in findings.items():
        result.notes.append(f"finding (not a violation): {finding} | reproduce: {curl}")
    result.check(requests >= min_requests, f"only {requests} requests (< {min_requests})")
    result.check(not unexpected, f"server errors in the web log: {unexpected}")
    result.violations.extend(violations)
    return result

"""The Prometheus alert rules (deploy/prometheus-alerts.yml) and the Grafana dashboard
(deploy/grafana-dashboard.json): every alert complete and documented, every metric they name
one the service's ``/metrics`` exports, and, with Debian's ``prometheus`` package installed,
``promtool check rules`` and ``promtool test rules`` (deploy/prometheus-alerts.test.yml)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

import config.urls
from payments.monitoring import views as metrics_views
from tests.support.processes import ROOT

urlpatterns = [
    path("metrics", metrics_views.metrics_view, name="metrics"),
    *config.urls.urlpatterns,
]

ALERTS = ROOT / "deploy" / "prometheus-alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

#: Metrics the rules and the dashboard may use before the service exports them: none.
NOT_YET_EXPORTED: set[str] = set()

#: PromQL words that look like metric names: functions, aggregations, keywords.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "rate", "increase", "delta", "irate", "time", "histogram_quantile", "and",
    "or", "unless", "bool", "offset", "absent", "clamp_min", "clamp_max", "topk", "bottomk",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: identifiers outside ``{...}`` label matchers,
    ``[...]`` ranges, ``(...)`` grouping label lists and strings, minus PromQL's own words."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr))
    return {word for word in words if word not in PROMQL_WORDS and not word.isdigit()}


@pytest.fixture
def exported(client, settings) -> set[str]:
    """Every sample name ``/metrics`` can export (a family without samples yet counts)."""
    settings.ROOT_URLCONF = __name__
    response = client.get("/metrics")
    assert response.status_code == 200
    names: set[str] = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.add(family.name)
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count"),
        }.get(family.type, ())
        names.update(family.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in family.samples)
    return names


def rules() -> list[dict]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def headings() -> set[str]:
    """GitHub's anchors of docs/operations.md's headings."""
    return {
        re.sub(r"[^a-z0-9 _-]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }


def test_every_alert_is_complete_and_has_a_runbook_section():
    """expr, for, a page or ticket severity, a summary and a runbook anchor that exists in
    docs/operations.md; names unique."""
    anchors = headings()
    seen = []
    for rule in rules():
        name = rule.get("alert")
        assert name and name not in seen, rule
        seen.append(name)
        assert rule.get("expr") and re.fullmatch(r"\d+[smh]", str(rule.get("for"))), name
        assert rule.get("labels", {}).get("severity") in {"page", "ticket"}, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary"), name
        assert annotations.get("runbook") == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/operations.md has no section {name}"
    assert {"PaymentsStuckProcessing", "PaymentsNeedsReviewGrowing", "AcquirerBreakerOpen",
            "AcquirerRetryBudgetEmpty", "ReconciliationLagging", "LedgerAuditDiscrepancies",
            "WorkerHeartbeatStale"} <= set(seen)  # fmt: skip


@pytest.mark.django_db
def test_every_metric_the_alerts_and_the_dashboard_name_is_exported(exported):
    """A renamed metric would leave an alert that never fires and a panel that stays empty."""
    exprs = {rule["alert"]: rule["expr"] for rule in rules()}
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            exprs[f"panel {panel['title']!r}"] = target["expr"]
    assert len(exprs) > 20
    missing = {
        where: sorted(metric_names(expr) - exported - NOT_YET_EXPORTED)
        for where, expr in exprs.items()
    }
    assert {where: names for where, names in missing.items() if names} == {}
    # The exemption is for what is really not exported yet: drop a name once it is.
    assert NOT_YET_EXPORTED.isdisjoint(exported), NOT_YET_EXPORTED & exported


def test_the_expression_parser_sees_the_metric_names():
    """The check above is only as good as this parser."""
    expr = (
        'sum by (operation) (rate(payments_acquirer_attempts_total{outcome!="ok"}[5m])) '
        "/ max without (instance) (payments_unresolved) > 2 * 86400 and time() - up"
    )
    assert metric_names(expr) == {"payments_acquirer_attempts_total", "payments_unresolved", "up"}


def test_the_dashboard_panels_are_complete():
    """Every panel has a title, a grid position and (rows aside) queries on the datasource
    variable, with unique ids."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["title"] and {"x", "y", "w", "h"} <= set(panel["gridPos"])
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}"


def promtool() -> str:
    """Debian's promtool (package ``prometheus``); absent: skipped here, a failure in CI."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: apt-get install prometheus")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


@pytest.mark.parametrize("command", [["check", "rules", ALERTS], ["test", "rules", ALERT_TESTS]])
def test_promtool_accepts_the_rules_and_their_tests(command):
    """``check rules``: valid PromQL and templates. ``test rules``: each alert fires on an
    incident's series, with its labels and summary, and not before its ``for``."""
    result = subprocess.run(
        [promtool(), *map(str, command)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr

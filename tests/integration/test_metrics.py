"""/metrics (Prometheus text) and /readyz, through a test urlconf wired like config/urls.py."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import path
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

import config.urls
from ledger.models import AuditRun
from payments.acquirer.metrics import GatewayMetrics
from payments.models import Payment
from payments.monitoring import health, metrics
from payments.monitoring import views as metrics_views
from tests.factories import PaymentFactory

# This module is the urlconf of its tests: the project's routes plus the two new ones.
urlpatterns = [
    path("metrics", metrics_views.metrics_view, name="metrics"),
    path("readyz", health.readyz, name="readyz"),
    *config.urls.urlpatterns,
]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    """GET /metrics and return {(sample name, sorted labels): value}."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def counter(sample: str, **labels: str) -> float:
    """The current value of a counter sample in this process's default registry."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(sample, labels) or 0.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- database gauges -----------------------------------------------------------------------


def test_unresolved_payments_are_counted_exactly(client):
    """payments_unresolved counts processing, needs_review and requires_action payments."""
    PaymentFactory.create_batch(2, status="processing")
    PaymentFactory(status="needs_review")
    PaymentFactory.create_batch(3, status="requires_action")
    PaymentFactory(status="succeeded")
    samples = scrape(client)
    assert samples[("payments_unresolved", (("status", "processing"),))] == 2
    assert samples[("payments_unresolved", (("status", "needs_review"),))] == 1
    assert samples[("payments_unresolved", (("status", "requires_action"),))] == 3


def test_oldest_processing_age_is_exported(client):
    """The age of the oldest processing payment, in seconds (0 when there is none)."""
    PaymentFactory(status="processing", created_at=timezone.now() - timedelta(minutes=10))
    PaymentFactory(status="processing")
    samples = scrape(client)
    age = samples[("payments_oldest_unresolved_age_seconds", (("status", "processing"),))]
    assert 600 <= age < 660
    assert samples[("payments_oldest_unresolved_age_seconds", (("status", "needs_review"),))] == 0


def test_payments_by_status_are_estimated_from_planner_statistics(client):
    """After ANALYZE, payments_by_status_estimated approximates each status's count."""
    PaymentFactory.create_batch(30, status="succeeded")
    PaymentFactory.create_batch(10, status="declined")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE payments_payment")
    samples = scrape(client)
    assert samples[("payments_by_status_estimated", (("status", "succeeded"),))] == 30
    assert samples[("payments_by_status_estimated", (("status", "declined"),))] == 10


def test_reconciliation_lag_is_how_long_the_most_overdue_payment_has_been_due(client):
    """A processing payment due 2 minutes ago sets the lag; one due later and a needs_review
    one with an old next check do not."""
    now = timezone.now()
    PaymentFactory(status="processing", next_check_at=now - timedelta(minutes=2))
    PaymentFactory(status="processing", next_check_at=now + timedelta(minutes=5))
    PaymentFactory(status="needs_review", next_check_at=now - timedelta(hours=2))
    lag = scrape(client)[("payments_reconciliation_lag_seconds", ())]
    assert 120 <= lag < 180
    Payment.objects.filter(next_check_at__lt=now).update(next_check_at=now + timedelta(hours=1))
    assert scrape(client)[("payments_reconciliation_lag_seconds", ())] == 0


def test_the_last_ledger_audit_is_exported(client):
    """The newest audit run's discrepancies and time; 0 and no time before any audit."""
    samples = scrape(client)
    assert samples[("payments_ledger_audit_discrepancies", ())] == 0
    assert ("payments_ledger_audit_last_run_timestamp_seconds", ()) not in samples
    ran_at = timezone.now()
    for ago, found in ((timedelta(days=1), 0), (timedelta(0), 3)):
        AuditRun.objects.create(
            ran_at=ran_at - ago, since=ran_at - ago - timedelta(hours=25),
            source="test", triggered_by="test", discrepancies_total=found,
        )  # fmt: skip
    samples = scrape(client)
    assert samples[("payments_ledger_audit_discrepancies", ())] == 3
    assert samples[("payments_ledger_audit_last_run_timestamp_seconds", ())] == pytest.approx(
        ran_at.timestamp()
    )
    assert samples[("payments_ledger_audit_collector_up", ())] == 1


def test_collector_reports_down_instead_of_failing_the_scrape(client, monkeypatch):
    """A database error: the scrape still answers, with payments_collector_up 0."""

    def broken():
        raise RuntimeError("database down")

    monkeypatch.setattr(metrics.PaymentsCollector, "_query", staticmethod(broken))
    samples = scrape(client)
    assert samples[("payments_collector_up", ())] == 0
    assert not any(name == "payments_unresolved" for name, _ in samples)


def test_scrape_runs_a_bounded_number_of_queries(client, django_assert_max_num_queries):
    """Eight cheap queries whatever the table size (counts, two minimums, the statistics, the
    heartbeats' small table, the webhook backlog, the earliest due check, the last audit run)."""
    PaymentFactory.create_batch(20, status="processing")
    with django_assert_max_num_queries(8):
        scrape(client)


def test_metrics_token_is_required_when_configured(client, settings):
    """With METRICS_BEARER_TOKEN set, a scrape without it answers 401."""
    settings.METRICS_BEARER_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION="Bearer s3cret")


# --- counters ------------------------------------------------------------------------------


def test_gateway_attempts_are_counted_by_operation_and_outcome():
    """The gateway client's "attempts" hook feeds payments_acquirer_attempts_total."""
    labels = {"operation": "authorize", "outcome": "ResponseTimeoutError"}
    before = counter("payments_acquirer_attempts_total", acquirer="alpha", **labels)
    GatewayMetrics("alpha").increment("attempts", **labels)
    assert counter("payments_acquirer_attempts_total", acquirer="alpha", **labels) == before + 1
    assert counter("payments_acquirer_attempts_total", acquirer="beta", **labels) == 0


def test_unmapped_gateway_counters_are_kept_by_name():
    """A client counter without its own metric lands in payments_gateway_client_events_total."""
    labels = {"acquirer": "", "name": "deadline_stops", "operation": "lookup"}
    before = counter("payments_gateway_client_events_total", **labels)
    GatewayMetrics().increment("deadline_stops", operation="lookup")
    assert counter("payments_gateway_client_events_total", **labels) == before + 1


def test_reconciliation_outcomes_are_counted_by_result():
    """record_reconciliation("resolved") adds one to that result."""
    before = counter("payments_reconciliation_outcomes_total", result="resolved")
    metrics.record_reconciliation("resolved")
    assert counter("payments_reconciliation_outcomes_total", result="resolved") == before + 1


@pytest.mark.parametrize(
    ("record", "name"),
    [
        (metrics.record_idempotency_replay, "payments_idempotency_replays_total"),
        (metrics.record_idempotency_key_in_use, "payments_idempotency_key_in_use_total"),
        (metrics.record_idempotency_key_reused, "payments_idempotency_key_reused_total"),
    ],
)
def test_idempotency_answers_are_counted(record, name):
    """Replays, 409s and 422s each have a counter."""
    before = counter(name)
    record()
    assert counter(name) == before + 1


def test_a_failing_counter_never_raises_into_payment_code(monkeypatch):
    """An exception inside an increment is logged and swallowed."""

    def broken(*args, **kwargs):
        raise ValueError("registry broken")

    monkeypatch.setattr(metrics.RECONCILIATION_OUTCOMES, "labels", broken)
    metrics.record_reconciliation("resolved")
    GatewayMetrics().increment("attempts", unexpected_label="x")


def test_counters_appear_in_the_scrape(client):
    """The in-process counters are served with the database gauges."""
    metrics.record_idempotency_replay()
    assert scrape(client)[("payments_idempotency_replays_total", ())] >= 1


# --- readiness -----------------------------------------------------------------------------


def test_readyz_is_200_when_database_and_broker_answer(client):
    """Both checks pass: 200 with each check "ok"."""
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_stays_200_and_reports_a_broker_nobody_listens_on(client, settings):
    """The broker is not needed to serve payments: still 200 (in rotation), "degraded", the
    broker "unavailable" in the body and at 0 in payments_dependency_up; no URL anywhere."""
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "broker": "unavailable"},
    }
    assert "127.0.0.1" not in response.content.decode()
    metrics = client.get("/metrics").content.decode()
    assert 'payments_dependency_up{dependency="broker"} 0.0' in metrics
    assert 'payments_dependency_up{dependency="database"} 1.0' in metrics


def test_readyz_is_503_when_the_database_check_fails(client, monkeypatch):
    """The database check raising: 503 with database unavailable."""

    def down():
        raise OSError("connection refused")

    monkeypatch.setitem(health.CHECKS, "database", down)
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["database"] == "unavailable"


def test_healthz_stays_up_when_a_dependency_is_down(client, monkeypatch):
    """/healthz reports the process only: 200 even when the database check fails."""
    monkeypatch.setitem(health.CHECKS, "database", lambda: 1 / 0)
    assert client.get("/healthz").status_code == 200

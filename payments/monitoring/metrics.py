"""The payments counters and the scrape-time gauges read from PostgreSQL, served at ``/metrics``
by :mod:`payments.monitoring.views`.

Two kinds, never mixed:

* **Counters incremented in process** (``record_*`` functions). They only add to in-memory
  values (or to the ``PROMETHEUS_MULTIPROC_DIR`` files when several processes share one
  exposition): no network call, no database write, and an exception inside them is swallowed and
  logged, so they can never change the outcome of a payment.
* **Gauges computed at scrape time from PostgreSQL** (:class:`PaymentsCollector`): cheap,
  index-backed queries only. The unresolved statuses (``processing``, ``needs_review``) are
  counted exactly; the whole table by status is the planner's estimate (``pg_class`` and
  ``pg_stats``, refreshed by autovacuum's ANALYZE), which costs nothing at any table size.

Metric names (labels in braces):

Gauges, computed at scrape time:

* ``payments_unresolved{status}``: exact count of ``processing``, ``deferred`` (the deferred
  backlog: not sent anywhere yet), ``needs_review`` and ``requires_action`` (waiting for the
  shopper: ADR 0049) payments.
* ``payments_oldest_unresolved_age_seconds{status}``: age of the oldest one (0 if none).
* ``payments_by_status_estimated{status}``: payments per status, planner estimate.
* ``payments_reconciliation_lag_seconds``: how long the most overdue ``processing`` payment
  has been due for its reconciliation check (``next_check_at`` in the past; 0 when none is).
* ``payments_deferred_lag_seconds``: how long the most overdue ``deferred`` payment has been
  due for submission (``not_before`` in the past; 0 when none is): the backlog not draining.
* ``payments_notifications_oldest_unapplied_age_seconds``: the age of the oldest stored
  provider notification not applied yet (0 if none): growing, notifications wait for ever.
* ``payments_collector_up``: 1 when the scrape-time queries succeeded, else 0.

Counters:

* ``payments_reconciliation_outcomes_total{result}``: reconciliations of one payment by
  result (``resolved``, ``retry_later``, ``needs_review``, ``waiting`` ...).
* ``payments_deferred_submissions_total{result}``: what the deferred sweep did with one
  payment: ``submitted`` (sent; the outcome recorded), ``deferred_again`` (certainly not
  applied: a later ``not_before``), ``expired`` (failed ``acquirer_unavailable`` at the
  maximum age); and ``payments_deferred_sweep_stops_total{reason}``: sweeps stopped before
  their batch by ``breaker``, ``rate_gate`` or ``refused`` (a submission certainly not applied).
* ``payments_acquirer_notifications_total{acquirer,outcome}``: verified provider notifications
  by ``stored`` (new) or ``duplicate`` (the same event identity again: nothing stored);
  ``payments_acquirer_notifications_rejected_total{acquirer,reason}``: notifications that
  failed verification or could not be read (``bad_signature``, ``missing_signature``,
  ``stale_timestamp``, ``malformed``, ``too_large``): nothing changed, alerted on;
  ``payments_acquirer_notifications_applied_total{acquirer,result}``: what one apply did
  (``applied``, ``retry_later``, ``ignored``).
* ``payments_idempotency_replays_total``: answers replayed from a stored idempotency key.
* ``payments_idempotency_key_in_use_total``: ``409 idempotency_key_in_use`` answers.
* ``payments_idempotency_key_reused_total``: ``422 idempotency_key_reused`` answers.

The gateway client's counters (``payments_acquirer_*``, ``payments_gateway_client_events``) are
:mod:`payments.acquirer.metrics`; the gauges of its shared state (breakers, AIMD limit) are
:mod:`payments.acquirer.collectors`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from django.db import connection
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from payments.models import AcquirerNotification, NotificationStatus, Payment, PaymentStatus

__all__ = [
    "PaymentsCollector",
    "record_deferred_submission",
    "record_deferred_sweep_stop",
    "record_idempotency_key_in_use",
    "record_idempotency_key_reused",
    "record_idempotency_replay",
    "record_notification",
    "record_notification_applied",
    "record_notification_rejected",
    "record_reconciliation",
]

logger = logging.getLogger(__name__)

#: ``deferred`` too: its exact count is the deferred backlog, its oldest age the backlog's age.
UNRESOLVED_STATUSES = (
    PaymentStatus.PROCESSING,
    PaymentStatus.DEFERRED,
    PaymentStatus.NEEDS_REVIEW,
    PaymentStatus.REQUIRES_ACTION,
)

# --- Counters (in process) -------------------------------------------------------------------

RECONCILIATION_OUTCOMES = Counter(
    "payments_reconciliation_outcomes",
    "Reconciliations of one payment, by result.",
    ["result"],
)
DEFERRED_SUBMISSIONS = Counter(
    "payments_deferred_submissions",
    "Deferred payments the sweep handled, by result (submitted, deferred_again, expired).",
    ["result"],
)
DEFERRED_SWEEP_STOPS = Counter(
    "payments_deferred_sweep_stops",
    "Deferred sweeps stopped before their batch, by reason (breaker, rate_gate, refused).",
    ["reason"],
)
NOTIFICATIONS = Counter(
    "payments_acquirer_notifications",
    "Verified provider notifications, by acquirer and outcome (stored, duplicate).",
    ["acquirer", "outcome"],
)
NOTIFICATIONS_REJECTED = Counter(
    "payments_acquirer_notifications_rejected",
    "Provider notifications refused (failed verification or unreadable), by acquirer and reason.",
    ["acquirer", "reason"],
)
NOTIFICATIONS_APPLIED = Counter(
    "payments_acquirer_notifications_applied",
    "Applications of one stored notification, by acquirer and result.",
    ["acquirer", "result"],
)
IDEMPOTENCY_REPLAYS = Counter(
    "payments_idempotency_replays", "Answers replayed from a completed idempotency key."
)
IDEMPOTENCY_KEY_IN_USE = Counter(
    "payments_idempotency_key_in_use", "409 idempotency_key_in_use answers (a request is running)."
)
IDEMPOTENCY_KEY_REUSED = Counter(
    "payments_idempotency_key_reused", "422 idempotency_key_reused answers (another request)."
)


def _safely(increment, *args: object) -> None:
    """Run one increment; a metrics failure is logged, never raised into payment code."""
    try:
        increment(*args)
    except Exception:  # metrics must never break a payment
        logger.exception("metrics increment failed")


def record_reconciliation(result: str) -> None:
    """Count one reconciliation of one payment with its ``Result`` value."""
    _safely(lambda: RECONCILIATION_OUTCOMES.labels(result=str(result)).inc())


def record_deferred_submission(result: str) -> None:
    """Count one deferred payment the sweep handled (``submitted``, ``deferred_again``,
    ``expired``)."""
    _safely(lambda: DEFERRED_SUBMISSIONS.labels(result=str(result)).inc())


def record_deferred_sweep_stop(reason: str) -> None:
    """Count one deferred sweep stopped early (``breaker``, ``rate_gate``, ``refused``)."""
    _safely(lambda: DEFERRED_SWEEP_STOPS.labels(reason=str(reason)).inc())


def record_notification(acquirer: str, outcome: str) -> None:
    """Count one verified notification of ``acquirer`` (``stored`` or ``duplicate``)."""
    _safely(lambda: NOTIFICATIONS.labels(acquirer=acquirer, outcome=outcome).inc())


def record_notification_rejected(acquirer: str, reason: str) -> None:
    """Count one notification refused at ``acquirer``'s endpoint, with its ``reason`` code."""
    _safely(lambda: NOTIFICATIONS_REJECTED.labels(acquirer=acquirer, reason=reason).inc())


def record_notification_applied(acquirer: str, result: str) -> None:
    """Count one application of a stored notification (``applied``, ``retry_later``,
    ``ignored``)."""
    _safely(lambda: NOTIFICATIONS_APPLIED.labels(acquirer=acquirer, result=result).inc())


def record_idempotency_replay() -> None:
    """Count one answer replayed from a stored idempotency key."""
    _safely(IDEMPOTENCY_REPLAYS.inc)


def record_idempotency_key_in_use() -> None:
    """Count one ``409 idempotency_key_in_use``."""
    _safely(IDEMPOTENCY_KEY_IN_USE.inc)


def record_idempotency_key_reused() -> None:
    """Count one ``422 idempotency_key_reused``."""
    _safely(IDEMPOTENCY_KEY_REUSED.inc)


# --- Gauges from PostgreSQL, computed at scrape time ----------------------------------------


class PaymentsCollector:
    """Scrape-time gauges from PostgreSQL; every query is an index probe or a catalog read.

    ``describe()`` runs no query, so registering the collector touches no database.
    """

    def describe(self) -> Iterable[Metric]:
        """The metric families (without samples), for the registry's name checks."""
        return list(self._families())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "payments_unresolved",
            "Payments whose outcome is not final, by status (exact).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_oldest_unresolved_age_seconds",
            "Age of the oldest payment in this status (0 when there is none).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_by_status_estimated",
            "Payments by status, estimated from planner statistics (ANALYZE).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_collector_up", "1 when the scrape-time database queries succeeded."
        )
        yield GaugeMetricFamily(
            "payments_reconciliation_lag_seconds",
            "How long the most overdue processing payment has been due for its reconciliation "
            "check (0 when none is due).",
        )
        yield GaugeMetricFamily(
            "payments_notifications_oldest_unapplied_age_seconds",
            "Age of the oldest stored provider notification not applied yet (0 when none is).",
        )
        yield GaugeMetricFamily(
            "payments_deferred_lag_seconds",
            "How long the most overdue deferred payment has been due for submission (0 when "
            "none is): growing, the backlog is not draining.",
        )

    def collect(self) -> Iterable[Metric]:
        """Run the queries; on a database error only ``payments_collector_up 0`` is exported."""
        unresolved, oldest, estimated, up, lag, unapplied, deferred_lag = self._families()
        try:
            counts, oldest_at, estimates = self._query()
            due_since = _earliest_due()
            deferred_due_since = _earliest_deferred_due()
            unapplied_since = _oldest_unapplied_notification()
        except Exception:  # a scrape answers even when the database does not
            logger.exception("payments metrics collector failed")
            up.add_metric([], 0)
            return [up]
        now = timezone.now()
        for status in UNRESOLVED_STATUSES:
            unresolved.add_metric([status], counts.get(status, 0))
            created = oldest_at.get(status)
            oldest.add_metric(
                [status], max((now - created).total_seconds(), 0.0) if created else 0.0
            )
        for status in PaymentStatus.values:
            estimated.add_metric([status], estimates.get(status, 0.0))
        lag.add_metric([], max((now - due_since).total_seconds(), 0.0) if due_since else 0.0)
        deferred_lag.add_metric(
            [],
            max((now - deferred_due_since).total_seconds(), 0.0) if deferred_due_since else 0.0,
        )
        unapplied.add_metric(
            [], max((now - unapplied_since).total_seconds(), 0.0) if unapplied_since else 0.0
        )
        up.add_metric([], 1)
        return [unresolved, oldest, estimated, up, lag, unapplied, deferred_lag]

    @staticmethod
    def _query() -> tuple[dict[str, int], dict[str, object], dict[str, float]]:
        # One grouped query (the index payment_status_created): each status's count and oldest.
        rows = list(
            Payment.objects.filter(status__in=UNRESOLVED_STATUSES)
            .order_by()
            .values("status")
            .annotate(n=Count("pk"), oldest=Min("created_at"))
        )
        counts = {row["status"]: row["n"] for row in rows}
        oldest_at = {row["status"]: row["oldest"] for row in rows}
        return counts, oldest_at, _estimated_by_status()


def _oldest_unapplied_notification():
    """The ``received_at`` of the oldest notification still ``received`` (the partial index
    ``acquirer_notification_due`` bounds the rows read), or None."""
    return AcquirerNotification.objects.filter(status=NotificationStatus.RECEIVED).aggregate(
        oldest=Min("received_at")
    )["oldest"]


def _earliest_due():
    """The earliest ``next_check_at`` of a processing payment (the partial index
    ``payment_reconciliation_due``), or None."""
    return (
        Payment.objects.filter(status=PaymentStatus.PROCESSING, next_check_at__isnull=False)
        .order_by()
        .aggregate(due=Min("next_check_at"))["due"]
    )


def _earliest_deferred_due():
    """The earliest ``not_before`` of a deferred payment (the partial index
    ``payment_deferred_due``), or None."""
    return (
        Payment.objects.filter(status=PaymentStatus.DEFERRED)
        .order_by()
        .aggregate(due=Min("not_before"))["due"]
    )


def _estimated_by_status() -> dict[str, float]:
    """Rows per status from ``pg_class.reltuples`` times ``pg_stats`` frequencies (no scan)."""
    table = Payment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, s.most_common_vals::text::text[], s.most_common_freqs"
            " FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema()"
            " AND s.tablename = c.relname AND s.attname = 'status'"
            " WHERE c.oid = to_regclass(%s)",
            [table],
        )
        row = cursor.fetchone()
    if row is None:
        return {}
    reltuples, values, freqs = row
    if not reltuples or reltuples < 0 or not values:  # never analysed yet
        return {}
    return {value: round(reltuples * freq) for value, freq in zip(values, freqs, strict=False)}

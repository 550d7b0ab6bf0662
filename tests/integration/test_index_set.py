"""The indexes of the tables every payment writes (ADR 0030): exactly this set, so an index
that no query needs does not come back unnoticed (each one costs an entry on every INSERT and
every non-HOT UPDATE), and the queries that lost an index read the one that replaced it (their
plans, with sequential scans off so that the tiny test tables still show which index serves).
Shapes only; ``bench/index_cost.py`` measures what the set costs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.services import idempotency_keys_purge_expired
from payments.core.selectors import payment_list
from tests.factories import PaymentFactory

pytestmark = pytest.mark.django_db

#: Table -> its indexes: (name, definition after ``USING btree``). Django's own names for the
#: primary keys, unique fields and the foreign keys that keep an index of their own.
INDEXES = {
    "payments_payment": {
        ("payments_payment_pkey", "(id)"),
        ("payments_payment_acquirer_idempotency_key_key", "(acquirer_idempotency_key)"),
        ("payments_payment_idempotency_key_id_key", "(idempotency_key_id)"),
        ("payment_merchant_created", "(merchant_id, created_at DESC, id DESC)"),
        ("payment_merchant_status", "(merchant_id, status, created_at DESC)"),
        ("payment_created", "(created_at DESC, id DESC)"),
        ("payment_status_created", "(status, created_at DESC, id DESC)"),
        ("payment_currency_created", "(currency, created_at DESC, id DESC)"),
        ("payment_reference_merchant", "(reference, merchant_id) WHERE (reference IS NOT NULL)"),
        (
            "payment_acquirer_ref_lookup",
            "(acquirer_reference) WHERE (acquirer_reference IS NOT NULL)",
        ),
        (
            "payment_reconciliation_due",
            "(next_check_at) WHERE ((status)::text = 'processing'::text)",
        ),
        ("payment_deferred_due", "(not_before) WHERE ((status)::text = 'deferred'::text)"),
        # Customer actions (ADR 0049): the return endpoint's look-up by token, and the expiry
        # sweep's due actions; only the rows that have one.
        ("payment_return_token", "(return_token) WHERE (return_token IS NOT NULL)"),
        (
            "payment_action_expiry_due",
            "(action_expires_at) WHERE ((status)::text = 'requires_action'::text)",
        ),
    },
    "idempotency_idempotencykey": {
        ("idempotency_idempotencykey_pkey", "(id)"),
        ("idempotency_key_unique_per_merchant", "(merchant_id, key)"),
        ("idempotency_idempotencykey_expires_at_d24a2787", "(expires_at)"),
        ("idempotency_key_lookup", "(key)"),
        (
            "idempotency_key_in_progress",
            "(expires_at DESC) WHERE ((status)::text = 'in_progress'::text)",
        ),
    },
    "payments_paymentevent": {
        ("payments_paymentevent_pkey", "(id)"),
        ("payment_event_timeline", "(payment_id, created_at)"),
        ("payment_event_request_id", "(request_id) WHERE (request_id IS NOT NULL)"),
    },
    "webhooks_event": {
        ("webhooks_event_pkey", "(id)"),
        ("event_merchant_created", "(merchant_id, created_at DESC, id DESC)"),
        ("event_merchant_type", "(merchant_id, type, created_at DESC, id DESC)"),
        ("event_object", "(object_id)"),
        ("event_created", "(created_at DESC, id DESC)"),
        # The sweep's look-up of events left unexpanded (ADR 0042): only those rows, so it
        # stays near empty; an event born fanned out (no endpoint) adds no entry.
        ("event_fan_out_pending", "(created_at) WHERE (fanned_out_at IS NULL)"),
    },
    "webhooks_delivery": {
        ("webhooks_delivery_pkey", "(id)"),
        ("delivery_once", "(event_id, endpoint_id)"),
        ("webhooks_delivery_endpoint_id_6cbee67d", "(endpoint_id)"),
        ("delivery_due", "(next_attempt_at) WHERE ((status)::text = 'pending'::text)"),
        (
            "delivery_endpoint_leases",
            "(endpoint_id, lease_until) WHERE ((status)::text = 'pending'::text)",
        ),
        ("delivery_backlog", "(created_at) WHERE ((status)::text = 'pending'::text)"),
    },
}


def _indexes(table: str) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return {(name, sql.split(" USING btree ", 1)[1]) for name, sql in cursor.fetchall()}


@pytest.mark.parametrize("table", sorted(INDEXES))
def test_the_tables_a_payment_writes_have_exactly_these_indexes(table):
    """No ``varchar_pattern_ops`` (``_like``) index and no foreign-key index that a composite
    one starting with the same column already serves: adding one is a decision (ADR 0030)."""
    assert _indexes(table) == INDEXES[table]


def _plan_indexes(sql: str) -> set[str]:
    """The indexes PostgreSQL's plan of ``sql`` reads, sequential scans disabled."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        (plan,) = cursor.fetchone()[0]
    found: set[str] = set()

    def walk(node: dict) -> None:
        if "Index Name" in node:
            found.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return found


def _captured(call) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        call()
    return [q["sql"] for q in queries.captured_queries]


def test_the_merchants_reference_filter_reads_the_reference_index(merchant_a):
    """GET /payments?reference= (the merchant and the reference: both columns of the index),
    among enough of the merchant's payments for the planner to prefer it to a walk in date
    order."""
    PaymentFactory.create_batch(50, merchant=merchant_a.merchant)
    PaymentFactory(merchant=merchant_a.merchant, reference="order-1")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE payments_payment")
    (sql,) = _captured(lambda: payment_list(merchant=merchant_a.merchant, reference="order-1"))
    assert _plan_indexes(sql) == {"payment_reference_merchant"}


def test_the_consoles_search_reads_the_id_reference_and_acquirer_reference_indexes(client):
    """The payments search (an OR of equalities): the primary key, and the two partial indexes
    an equality proves (``reference = x`` implies ``reference IS NOT NULL``)."""
    from tests.integration.test_admin import staff_client

    support = staff_client(client, "support")
    PaymentFactory(reference="order-1")
    statements = _captured(lambda: support.get("/admin/payments/payment/", {"q": "order-1"}))
    searches = [s for s in statements if '"payments_payment"."acquirer_reference" =' in s]
    wanted = {"payments_payment_pkey", "payment_reference_merchant", "payment_acquirer_ref_lookup"}
    assert searches and all(_plan_indexes(sql) >= wanted for sql in searches), searches


def test_the_key_consoles_in_progress_filter_and_the_purge_read_their_indexes(client):
    """The keys console's in_progress filter reads the partial index; the purge, the
    ``expires_at`` index."""
    from tests.integration.test_admin import staff_client

    support = staff_client(client, "support")
    statements = _captured(
        lambda: support.get("/admin/idempotency/idempotencykey/", {"status__exact": "in_progress"})
    )
    listed = [s for s in statements if "ORDER BY" in s and "idempotency_idempotencykey" in s]
    assert listed and all("idempotency_key_in_progress" in _plan_indexes(sql) for sql in listed), (
        listed
    )
    statements = _captured(
        lambda: idempotency_keys_purge_expired(now=timezone.now() + timedelta(days=2))
    )
    assert "idempotency_idempotencykey_expires_at_d24a2787" in _plan_indexes(statements[0])


def test_the_sweeps_look_up_of_unexpanded_events_reads_its_partial_index():
    """events_fan_out_pending (the beat sweep, ADR 0042) reads ``event_fan_out_pending``."""
    from webhooks.fanout import events_fan_out_pending

    statements = _captured(lambda: events_fan_out_pending(now=timezone.now()))
    assert "event_fan_out_pending" in _plan_indexes(statements[0])

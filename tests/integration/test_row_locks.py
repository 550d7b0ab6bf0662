"""Lock order between the API and reconciliation: no deadlock on a payment row."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from payments.core.payment_states import payment_event_record, payment_lock
from payments.models import PaymentEventType
from tests.factories import PaymentFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_appending_an_event_is_not_blocked_by_reconciliation_holding_the_payment():
    """Reconciliation holds the payment row (FOR NO KEY UPDATE) and will ask for the key; a
    merchant's retry holding the key appends an event, whose foreign key takes KEY SHARE on the
    payment: it must not wait (with FOR UPDATE it would, and the two would deadlock)."""
    payment = PaymentFactory(status="processing")
    locked, release = threading.Event(), threading.Event()

    def reconciliation_holds_the_payment() -> None:
        try:
            with transaction.atomic():
                payment_lock(payment.pk)  # what reconciliation takes (FOR NO KEY UPDATE)
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=reconciliation_holds_the_payment)
    holder.start()
    try:
        assert locked.wait(30)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")  # a wait would raise here
            payment_event_record(
                payment=payment,
                event_type=PaymentEventType.MERCHANT_RETRY,
                now=timezone.now(),
                data={},
            )
    finally:
        release.set()
        holder.join(30)
    assert payment.events.filter(type="merchant_retry").count() == 1

"""Key take-over after a crash, the purge task, and claim rules on real PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from idempotency.errors import IdempotencyKeyInUse
from idempotency.models import IdempotencyKey
from idempotency.services import ClaimOutcome, idempotency_key_claim
from payments.models import Payment
from payments.reconciliation.tasks import purge_expired_idempotency_keys
from tests.factories import MerchantFactory, PaymentFactory
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

RETENTION = timedelta(hours=24)
LOCK = timedelta(seconds=60)


def claim(merchant, key, now, fingerprint="f" * 64):
    with transaction.atomic():
        return idempotency_key_claim(
            merchant_id=merchant.pk, key=key, method="POST", route="/payments",
            fingerprint=fingerprint, now=now, retention=RETENTION, lock_timeout=LOCK,
        )  # fmt: skip


def test_claim_outside_a_transaction_is_refused(db):
    """The claim must share the caller's phase-1 transaction."""
    merchant = MerchantFactory()
    with pytest.raises(RuntimeError):
        idempotency_key_claim(
            merchant_id=merchant.pk, key="k", method="POST", route="/payments",
            fingerprint="f" * 64, now=timezone.now(), retention=RETENTION, lock_timeout=LOCK,
        )  # fmt: skip


def test_in_progress_key_is_409_until_the_lock_times_out():
    """A key in progress answers 409 at 59 s and is taken over at 60 s."""
    merchant, now = MerchantFactory(), timezone.now()
    assert claim(merchant, "k", now).outcome is ClaimOutcome.CREATED
    with pytest.raises(IdempotencyKeyInUse):
        claim(merchant, "k", now + timedelta(seconds=59))
    assert claim(merchant, "k", now + timedelta(seconds=60)).outcome is ClaimOutcome.TAKEN_OVER


def test_crashed_request_is_resumed_by_the_next_retry(merchant_a, sandbox):
    """A key left in progress by a crash (phase 1 committed, no call) is taken over after the
    lock timeout; the retry sends the committed payment once and answers 201."""
    first = merchant_a.create_payment(PAYMENT_BODY, key="crash-1")
    payment = Payment.objects.get()
    # Simulate the crash: the key back in progress, locked long ago, the payment unresolved.
    IdempotencyKey.objects.update(
        status="in_progress", locked_at=timezone.now() - timedelta(minutes=5),
        response_status=None, response_body=None,
    )  # fmt: skip
    Payment.objects.update(status="processing", acquirer_reference=None)
    sandbox.reset()
    retry = merchant_a.create_payment(PAYMENT_BODY, key="crash-1")
    assert first.status_code == retry.status_code == 201
    assert retry.json()["id"] == payment.id
    assert Payment.objects.count() == 1
    assert sandbox.stats()["charges_total"] == 1
    assert "key_taken_over" in payment.events.values_list("type", flat=True)


def test_purge_deletes_expired_keys_and_keeps_unresolved_ones():
    """Expired keys go, in batches; unexpired keys and keys of processing payments stay."""
    merchant, now = MerchantFactory(), timezone.now()
    past = now - RETENTION - timedelta(seconds=1)
    for i in range(5):
        claim(merchant, f"old-{i}", past)
    claim(merchant, "fresh", now)
    claim(merchant, "unresolved", past)
    PaymentFactory(merchant=merchant, status="processing",
                   idempotency_key=IdempotencyKey.objects.get(key="unresolved"))  # fmt: skip
    PaymentFactory(merchant=merchant, status="succeeded",
                   idempotency_key=IdempotencyKey.objects.get(key="old-0"))  # fmt: skip
    from django.test import override_settings

    with override_settings(IDEMPOTENCY_KEY_PURGE_BATCH_SIZE=2):
        deleted = purge_expired_idempotency_keys()
    assert deleted == 5
    assert set(IdempotencyKey.objects.values_list("key", flat=True)) == {"fresh", "unresolved"}
    assert Payment.objects.filter(idempotency_key__isnull=True).count() == 1  # the payment stays


def test_purge_task_is_in_the_beat_schedule(settings):
    """Celery beat runs the purge periodically."""
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "payments.tasks.purge_expired_idempotency_keys" in tasks

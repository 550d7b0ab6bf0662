"""Celery tasks of the payments app. Each takes plain arguments and calls one service.

Tasks never retry around the gateway client: the client is the only retry layer.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from idempotency.services import idempotency_keys_purge_expired
from payments.models import PaymentStatus

logger = logging.getLogger(__name__)

#: Keys whose payment is unresolved are kept: reconciliation still refreshes their answer.
UNRESOLVED_PAYMENT = Q(payment__status__in=[PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW])


@shared_task(name="payments.tasks.purge_expired_idempotency_keys", ignore_result=True)
def purge_expired_idempotency_keys() -> int:
    """Delete expired idempotency keys in batches, keeping those of unresolved payments.

    Returns the number of keys deleted. Safe to run twice at once (deletes are idempotent).
    """
    deleted = idempotency_keys_purge_expired(
        now=timezone.now(),
        batch_size=settings.IDEMPOTENCY_KEY_PURGE_BATCH_SIZE,
        keep=UNRESOLVED_PAYMENT,
    )
    logger.info("purged %d expired idempotency keys", deleted)
    return deleted

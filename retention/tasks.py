"""Beat's retention purge (``retention.tasks.purge_expired_data``, hourly by default)."""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from retention.policy import RetentionPolicy
from retention.purges import PURGES, PurgeReport, audit_csv_files_remove, purge_in_batches
from retention.redis_keys import webhook_breaker_keys_purge
from webhooks.models import WebhookEndpoint

logger = logging.getLogger(__name__)


def _live_endpoints(ids: list[str]) -> list[str]:
    return list(
        WebhookEndpoint.objects.filter(pk__in=ids, deleted_at__isnull=True).values_list(
            "pk", flat=True
        )
    )


def expired_data_purge(*, now: datetime, policy: RetentionPolicy) -> PurgeReport:
    """Run every purge of retention.purges at ``now`` (the caller's clock), then remove the
    ledger audit's old CSV files and the breaker keys of endpoints no longer live (in
    ``ACQUIRER_STATE_REDIS_URL``; none without it: the state is then per process). Returns
    what was deleted. Raises ``DatabaseError``; a Redis error is logged and the keys are left
    for the next run."""
    rows = {
        label: purge_in_batches(select, now=now, policy=policy) for label, select in PURGES.items()
    }
    files = audit_csv_files_remove(now, policy)
    keys = 0
    if settings.ACQUIRER_STATE_REDIS_URL:
        client = redis.Redis.from_url(settings.ACQUIRER_STATE_REDIS_URL, socket_timeout=5)
        try:
            keys = webhook_breaker_keys_purge(
                client,
                namespace=settings.WEBHOOK_STATE_NAMESPACE,
                live_endpoint_ids=_live_endpoints,
            )
        except redis.RedisError as exc:
            logger.warning("retention: breaker keys not purged (%s)", type(exc).__name__)
        finally:
            client.close()
    return PurgeReport(rows=rows, files=files, redis_keys=keys)


@shared_task(name="retention.tasks.purge_expired_data", ignore_result=True)
def purge_expired_data() -> dict[str, int]:
    """Delete what is past its retention (docs/data.md). Safe to run twice at once (each batch
    locks its rows with SKIP LOCKED). Returns the counts by model label, plus ``files`` and
    ``redis_keys``."""
    report = expired_data_purge(now=timezone.now(), policy=RetentionPolicy.from_settings())
    counts = {**report.rows, "files": report.files, "redis_keys": report.redis_keys}
    logger.info("retention purge: %s", {k: v for k, v in counts.items() if v})
    return counts

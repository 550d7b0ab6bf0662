"""Retention's purges on real PostgreSQL and Redis, at an injected ``now`` (retention/,
docs/data.md, ADR 0045): what is past its period goes, in batches; what is still needed
stays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis
from axes.models import AccessAttempt, AccessLog
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.checks import run_checks

from heartbeats.models import Heartbeat
from ledger.models import AuditRun
from merchants.models import ApiKey
from payments.models import (
    AcquirerNotification,
    NotificationStatus,
    OperationKind,
    OperationStatus,
    PaymentEvent,
    PaymentOperation,
)
from retention.policy import RetentionPolicy
from retention.purges import acquirer_notifications, payment_events, purge_in_batches
from retention.redis_keys import webhook_breaker_keys_purge
from retention.tasks import expired_data_purge
from tests.factories import MerchantFactory, PaymentFactory
from tests.support.redis import suite_redis_url
from webhooks.models import Delivery, DeliveryAttempt, Event, OperatorAction, WebhookEndpoint

pytestmark = pytest.mark.django_db

#: The injected clock: every row's age is counted back from here.
NOW = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def policy(**changes) -> RetentionPolicy:
    base = RetentionPolicy(
        payment_event=730 * DAY, webhook_event=30 * DAY, deleted_webhook_endpoint=30 * DAY,
        audit_trail=400 * DAY, ended_api_key=400 * DAY, heartbeat=7 * DAY,
        login_cooloff=timedelta(minutes=15), batch_size=1000,
        acquirer_notification=35 * DAY,
    )  # fmt: skip
    return RetentionPolicy(**{**base.__dict__, **changes})


def event_of(payment, at):
    return PaymentEvent.objects.create(payment=payment, type="created", data={}, created_at=at)


def test_payment_history_goes_after_the_period_only_once_nothing_can_change_it():
    """Events of a final payment unchanged for 730 days go; the payment stays. A payment still
    processing, one with a refund pending, and one changed recently keep theirs."""
    old = NOW - 731 * DAY
    final = PaymentFactory(status="succeeded", created_at=old, updated_at=old)
    processing = PaymentFactory(status="processing", created_at=old, updated_at=old)
    refund_pending = PaymentFactory(status="succeeded", created_at=old, updated_at=old)
    PaymentOperation.objects.create(
        payment=refund_pending, kind=OperationKind.REFUND, status=OperationStatus.PENDING,
        amount=1, created_at=old, updated_at=old, acquirer_idempotency_key="refund-x",
    )  # fmt: skip
    changed_lately = PaymentFactory(status="succeeded", created_at=old, updated_at=NOW - DAY)
    for payment in (final, processing, refund_pending, changed_lately):
        event_of(payment, old)
    recent_of_final = event_of(final, NOW - 700 * DAY)

    report = expired_data_purge(now=NOW, policy=policy())

    assert report.rows["payments.PaymentEvent"] == 1
    assert set(PaymentEvent.objects.values_list("payment_id", flat=True)) == {
        final.id, processing.id, refund_pending.id, changed_lately.id,
    }  # fmt: skip
    assert PaymentEvent.objects.filter(payment=final).get() == recent_of_final
    assert final.__class__.objects.filter(pk=final.pk).exists()  # payments are kept


def test_purges_delete_in_batches_each_its_own_transaction():
    """Five rows at a batch of two: three batches of 2, 2 and 1, every row gone."""
    old = NOW - 800 * DAY
    payment = PaymentFactory(status="declined", created_at=old, updated_at=old)
    for _ in range(5):
        event_of(payment, old)
    batches: list[int] = []
    deleted = purge_in_batches(
        payment_events, now=NOW, policy=policy(batch_size=2),
        deleted=lambda batch: batches.append(len(batch)),
    )  # fmt: skip
    assert (deleted, batches) == (5, [2, 2, 1])
    assert not PaymentEvent.objects.exists()


def endpoint(merchant, **fields) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        merchant=merchant, url="https://merchant.example/hook", enabled_events=["*"],
        secret="whsec_" + "a" * 32, created_at=NOW - 90 * DAY, updated_at=NOW - 90 * DAY,
        **fields,
    )  # fmt: skip


def webhook_event(merchant, at, *, to=None, status="delivered") -> Event:
    event = Event.objects.create(
        merchant=merchant, type="payment.succeeded", object_id="pay_x", data="{}", created_at=at
    )
    if to is not None:
        delivery = Delivery.objects.create(
            event=event, endpoint=to, status=status, window_started_at=at, created_at=at
        )
        DeliveryAttempt.objects.create(
            delivery=delivery, endpoint=to, event=event, number=1, started_at=at,
            duration_ms=5, status_code=500, outcome="failed", response_body="x" * 1000,
        )  # fmt: skip
    return event


def test_webhook_events_go_with_their_deliveries_and_attempts_unless_still_needed():
    """After 30 days an event goes with its deliveries and attempts (their bodies); one with
    a pending delivery, or one an operator re-delivered within the audit period, stays."""
    merchant = MerchantFactory()
    live = endpoint(merchant)
    old = NOW - 31 * DAY
    done = webhook_event(merchant, old, to=live)
    pending = webhook_event(merchant, old, to=endpoint(merchant), status="pending")
    acted_on = webhook_event(merchant, old)
    OperatorAction.objects.create(
        operator="ops", action="redeliver_event", event=acted_on, note="asked", created_at=old
    )
    recent = webhook_event(merchant, NOW - 29 * DAY, to=live)

    report = expired_data_purge(now=NOW, policy=policy())

    assert report.rows["webhooks.Event"] == 1
    assert set(Event.objects.values_list("pk", flat=True)) == {pending.pk, acted_on.pk, recent.pk}
    assert not Delivery.objects.filter(event_id=done.pk).exists()
    assert not DeliveryAttempt.objects.filter(event_id=done.pk).exists()
    assert DeliveryAttempt.objects.filter(event=recent).count() == 1
    assert OperatorAction.objects.count() == 1


def test_acquirer_notifications_go_after_the_period_once_applied_or_ignored():
    """An applied or ignored notification older than the period goes; one still waiting for
    its payment stays whatever its age, and a recent one stays (re-sends still meet it)."""

    def notification(event_id, status, age_days):
        return AcquirerNotification.objects.create(
            acquirer="alpha", event_id=event_id, event_type="charge.succeeded",
            subject="payment", body="{}", status=status, received_at=NOW - age_days * DAY,
        )  # fmt: skip

    notification("old-applied", NotificationStatus.APPLIED, 36)
    notification("old-ignored", NotificationStatus.IGNORED, 36)
    notification("old-waiting", NotificationStatus.RECEIVED, 90)
    notification("recent-applied", NotificationStatus.APPLIED, 34)

    deleted = purge_in_batches(acquirer_notifications, now=NOW, policy=policy(batch_size=1))
    assert deleted == 2
    kept = set(AcquirerNotification.objects.values_list("event_id", flat=True))
    assert kept == {"old-waiting", "recent-applied"}


def test_deleted_endpoints_go_with_their_breaker_keys_in_redis():
    """An endpoint deleted 31 days ago goes with its deliveries; one deleted yesterday and a
    live one stay. Breaker keys of endpoints not live (deleted, or gone) are unlinked from
    Redis; the live one's breaker state stays."""
    merchant = MerchantFactory()
    live = endpoint(merchant)
    deleted_lately = endpoint(merchant, deleted_at=NOW - DAY)
    long_deleted = endpoint(merchant, deleted_at=NOW - 31 * DAY)
    webhook_event(merchant, NOW - DAY, to=long_deleted)

    report = expired_data_purge(now=NOW, policy=policy())
    assert report.rows["webhooks.WebhookEndpoint"] == 1
    assert set(WebhookEndpoint.objects.values_list("pk", flat=True)) == {
        live.pk, deleted_lately.pk,
    }  # fmt: skip
    assert not Delivery.objects.filter(endpoint_id=long_deleted.pk).exists()

    client = redis.Redis.from_url(suite_redis_url())
    namespace = f"retention-test-{live.pk}"
    keys = {
        pk: f"{namespace}:breaker:webhooks:{pk}" for pk in (live.pk, deleted_lately.pk, "we_gone")
    }
    try:
        for key in keys.values():
            client.hset(key, mapping={"st": "1", "gen": "3"})
        unrelated = f"{namespace}:breaker:gateway:alpha"
        client.hset(unrelated, "st", "0")
        removed = webhook_breaker_keys_purge(
            client, namespace=namespace, scan_count=2,
            live_endpoint_ids=lambda ids: WebhookEndpoint.objects.filter(
                pk__in=ids, deleted_at__isnull=True
            ).values_list("pk", flat=True),
        )  # fmt: skip
        assert removed == 2
        assert client.exists(keys[live.pk], unrelated) == 2
        assert client.exists(keys[deleted_lately.pk], keys["we_gone"]) == 0
    finally:
        client.delete(*keys.values(), f"{namespace}:breaker:gateway:alpha")
        client.close()


def test_audit_trail_logins_sessions_keys_audits_and_heartbeats(tmp_path, settings):
    """The audit trail (admin log, operator actions, login log, audit runs and their CSV
    files) goes after 400 days; lockout counters after the cool-off; sessions at expiry; API
    keys 400 days after revocation; heartbeats unseen for a week, each kind's newest kept."""
    settings.LEDGER_AUDIT_CSV_DIR = str(tmp_path)
    user = User.objects.create(username="ops")
    for at in (NOW - 401 * DAY, NOW - 399 * DAY):
        entry = LogEntry.objects.create(user=user, action_flag=ADDITION, object_repr="x")
        LogEntry.objects.filter(pk=entry.pk).update(action_time=at)
        OperatorAction.objects.create(operator="ops", action="enable_endpoint", note="n",
                                      created_at=at)  # fmt: skip
        log = AccessLog.objects.create(username="ops", ip_address="127.0.0.1", user_agent="t")
        AccessLog.objects.filter(pk=log.pk).update(attempt_time=at)
        AuditRun.objects.create(ran_at=at, since=at, source="s", triggered_by="task")
        (tmp_path / f"audit-{at:%Y%m%dT%H%M%SZ}.csv").write_text("id\n")
    (tmp_path / "notes.csv").write_text("kept: not an audit file\n")
    for minutes in (16, 14):
        attempt = AccessAttempt.objects.create(
            username=f"u{minutes}", ip_address="127.0.0.1", user_agent="t", failures_since_start=1
        )
        AccessAttempt.objects.filter(pk=attempt.pk).update(
            attempt_time=NOW - timedelta(minutes=minutes)
        )
    Session.objects.create(session_key="a" * 32, session_data="", expire_date=NOW - DAY)
    Session.objects.create(session_key="b" * 32, session_data="", expire_date=NOW + DAY)
    merchant = MerchantFactory()
    for name, revoked in (("old", NOW - 401 * DAY), ("lately", NOW - DAY), ("live", None)):
        ApiKey.objects.create(merchant=merchant, prefix=name, key_hash=name * 8,
                              revoked_at=revoked)  # fmt: skip
    for name, kind, age in (
        ("celery@a", "worker", 8), ("celery@b", "worker", 9), ("celery@c", "worker", 1),
        ("beat@a", "beat", 30), ("beat@b", "beat", 20),
    ):  # fmt: skip
        Heartbeat.objects.create(name=name, kind=kind, pid=1, seen_at=NOW - age * DAY)

    report = expired_data_purge(now=NOW, policy=policy())

    assert {label: n for label, n in report.rows.items() if n} == {
        "admin.LogEntry": 1, "webhooks.OperatorAction": 1, "axes.AccessLog": 1,
        "ledger.AuditRun": 1, "axes.AccessAttempt": 1, "sessions.Session": 1,
        "merchants.ApiKey": 1, "heartbeats.Heartbeat": 3,
    }  # fmt: skip
    assert report.files == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"audit-{NOW - 399 * DAY:%Y%m%dT%H%M%SZ}.csv", "notes.csv",
    ]  # fmt: skip
    assert set(AccessAttempt.objects.values_list("username", flat=True)) == {"u14"}
    assert set(ApiKey.objects.values_list("prefix", flat=True)) == {"lately", "live"}
    assert set(Heartbeat.objects.values_list("name", flat=True)) == {"celery@c", "beat@b"}
    again = expired_data_purge(now=NOW, policy=policy())
    assert sum(again.rows.values()) + again.files == 0  # idempotent


def test_the_purge_runs_from_beat_and_its_settings_are_checked(settings):
    """Beat schedules the purge; a period below its floor is a system check error."""
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "retention.tasks.purge_expired_data" in tasks
    assert not [e for e in run_checks() if e.id.startswith("retention.")]
    settings.RETENTION_PAYMENT_EVENT_DAYS = 120
    settings.RETENTION_AUDIT_TRAIL_DAYS = 90
    settings.RETENTION_WEBHOOK_EVENT_DAYS = 2
    settings.RETENTION_PURGE_BATCH_SIZE = 0
    errors = [e for e in run_checks() if e.id.startswith("retention.")]
    assert sorted(e.msg.split(" ")[0] for e in errors) == [
        "RETENTION_AUDIT_TRAIL_DAYS", "RETENTION_PAYMENT_EVENT_DAYS", "RETENTION_PURGE_BATCH_SIZE",
        "RETENTION_WEBHOOK_EVENT_DAYS",
    ]  # fmt: skip

"""A broker outage never reaches a payment's answer: tasks are enqueued after commit, robustly,
and the reconciliation sweep finds what a lost enqueue left (docs/operations.md)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from config.celery_app import app
from payments.models import Payment
from payments.reconciliation.payments import ReconciliationPolicy, reconciliation_claim_due
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_down() -> Iterator[None]:
    """The Celery app's broker is a Redis port nobody listens on (connections refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    saved = app.conf.broker_url, app.conf.broker_write_url, app.conf.broker_transport_options
    saved_pools = app._pool, app.amqp._producer_pool
    app.conf.broker_url = app.conf.broker_write_url = f"redis://127.0.0.1:{port}/0"
    app.conf.broker_transport_options = {"socket_connect_timeout": 2}
    app._pool = app.amqp._producer_pool = None  # producers are pooled per broker URL
    try:
        yield
    finally:
        app.conf.broker_url, app.conf.broker_write_url, app.conf.broker_transport_options = saved
        app._pool, app.amqp._producer_pool = saved_pools


def test_an_unknown_outcome_is_answered_202_when_the_enqueue_fails(
    merchant_a, sandbox, single_attempt, broker_down, caplog
):
    # Django's robust on_commit logs under "django", which the project's logging does not
    # propagate to the root logger (observability/log_config.py): listen on it directly.
    # An in-process Celery worker of an earlier test may have left it disabled or raised its
    # level: set both for this request.
    django_logger = logging.getLogger("django.db.backends.base")
    saved = django_logger.disabled, django_logger.level
    django_logger.disabled = False
    django_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.ERROR, logger="django.db.backends.base"):
            response = merchant_a.create_payment(
                {**PAYMENT_BODY, "payment_method": "tok_reset_before_commit"}
            )
    finally:
        django_logger.removeHandler(caplog.handler)
        django_logger.disabled, django_logger.level = saved
    assert response.status_code == 202
    assert "on_commit" in caplog.text  # the failed enqueue was logged, not raised
    payment = Payment.objects.get(pk=response.json()["id"])
    assert payment.status == "processing" and payment.next_check_at is not None
    policy = ReconciliationPolicy(
        grace=60, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5
    )
    later = timezone.now() + timedelta(hours=1)
    assert payment.pk in reconciliation_claim_due(now=later, policy=policy)  # the sweep's

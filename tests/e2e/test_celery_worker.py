"""A real Celery worker runs the project's tasks: with no broker configured (the embedded Redis,
what `make run` uses) and with the suite's Redis URL set (as in production)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from devtools.embedded_redis import embedded_redis, stop_embedded_redis
from idempotency.models import IdempotencyKey
from tests.factories import MerchantFactory
from tests.support.processes import CELERY_WORKER, ROOT, service_env, wait_until
from tests.support.redis import suite_broker_url

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def expired_key(name: str) -> None:
    past = timezone.now() - timedelta(days=2)
    IdempotencyKey.objects.create(
        merchant=MerchantFactory(), key=name, method="POST", route="/payments",
        request_fingerprint="0" * 64, status="in_progress", locked_at=past,
        created_at=past, expires_at=past + timedelta(days=1),
    )  # fmt: skip


@pytest.fixture(params=["embedded", "redis_url"])
def broker(request, redis_url, tmp_path, monkeypatch) -> Iterator[tuple[dict[str, str], str]]:
    """The environment of a worker and a producer sharing one broker and one queue, and the
    start of the broker URL the worker's banner must show."""
    queue = f"test-{tmp_path.name}"
    if request.param == "embedded":
        # No CELERY_BROKER_URL at all: the settings start or reuse the embedded Redis, here one
        # in this test's own directory (never the checkout's .redis/), stopped afterwards.
        monkeypatch.setenv("EMBEDDED_REDIS_DIR", str(tmp_path / "r"))
        env = service_env(CELERY_BROKER_URL=None, CELERY_DEFAULT_QUEUE=queue)
        try:
            yield env, f"redis+socket://{embedded_redis().socket_path}"
        finally:
            stop_embedded_redis()
        return
    broker_url = suite_broker_url(redis_url)
    env = service_env(CELERY_BROKER_URL=broker_url, CELERY_DEFAULT_QUEUE=queue)
    parts = urlsplit(broker_url)  # the banner masks the password: compare the address only
    if parts.scheme == "redis+socket":
        yield env, parts.path
    else:
        yield env, f"{parts.hostname}:{parts.port or 6379}"


def test_worker_runs_the_purge_task(broker, tmp_path):
    """A task sent through the broker is executed by a separate worker process."""
    broker_env, transport = broker
    expired_key("to-purge")
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        CELERY_WORKER,
        cwd=ROOT, env=broker_env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from payments.reconciliation.tasks import purge_expired_idempotency_keys as t; "
             "t.delay()"],
            cwd=ROOT, env=broker_env, check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        wait_until(
            lambda: not IdempotencyKey.objects.filter(key="to-purge").exists(),
            timeout=60,
            what="the worker to purge the expired key:\n" + (tmp_path / "worker.log").read_text(),
        )
    finally:
        worker.terminate()
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
    log_text = (tmp_path / "worker.log").read_text()
    assert "purged 1 expired idempotency keys" in log_text
    assert transport in log_text  # the worker's banner names the broker it used

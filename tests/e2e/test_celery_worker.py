"""A real Celery worker runs the project's tasks: with no broker configured (kombu's filesystem
transport, what `make run` uses) and with Redis (production)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyKey
from tests.factories import MerchantFactory
from tests.support.processes import CELERY_WORKER, ROOT, service_env, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def expired_key(name: str) -> None:
    past = timezone.now() - timedelta(days=2)
    IdempotencyKey.objects.create(
        merchant=MerchantFactory(), key=name, method="POST", route="/payments",
        request_fingerprint="0" * 64, status="in_progress", locked_at=past,
        created_at=past, expires_at=past + timedelta(days=1),
    )  # fmt: skip


@pytest.fixture(params=["filesystem", "redis"])
def broker_env(request, tmp_path) -> Iterator[dict[str, str]]:
    """The environment of a worker and a producer sharing one broker."""
    if request.param == "filesystem":
        yield service_env(CELERY_FILESYSTEM_DIR=str(tmp_path / "celery"))
    else:
        yield service_env(CELERY_BROKER_URL=REDIS_URL, CELERY_DEFAULT_QUEUE=f"test-{tmp_path.name}")


def test_worker_runs_the_purge_task(broker_env, tmp_path):
    """A task sent through the broker is executed by a separate worker process."""
    (tmp_path / "celery" / "queue").mkdir(parents=True, exist_ok=True)
    (tmp_path / "celery" / "processed").mkdir(parents=True, exist_ok=True)
    expired_key("to-purge")
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        CELERY_WORKER,
        cwd=ROOT, env=broker_env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from payments.tasks import purge_expired_idempotency_keys as t; t.delay()"],
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
    assert "purged 1 expired idempotency keys" in (tmp_path / "worker.log").read_text()

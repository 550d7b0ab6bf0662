"""Whole-fleet metrics: gunicorn as the Procfile runs it (config/gunicorn.conf.py, here with 3
workers and no ``PROMETHEUS_MULTIPROC_DIR``) is in Prometheus multiprocess mode by itself, so one
scrape of ``/metrics`` adds up every worker's counters, whichever worker answers the scrape."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
from celery import Celery
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import (
    CELERY_WORKER,
    GUNICORN,
    ROOT,
    free_port,
    service_env,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: django-prometheus's counter of answers by status, view and method.
ANSWERS = "django_http_responses_total_by_status_view_method_total"
HEALTHZ = {"status": "200", "view": "healthz", "method": "GET"}


@pytest.fixture
def web(transactional_db, tmp_path) -> Iterator[tuple[str, Path]]:
    """gunicorn with 3 single-threaded workers; yields its URL and the metrics directory its
    master made (as its log says)."""
    port = free_port()
    env = service_env(
        WEB_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="3",
        WEB_THREADS="1",
        WEB_KEEPALIVE="0",
        PROMETHEUS_MULTIPROC_DIR=None,
    )
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        found = None
        try:
            wait_until(lambda: _up(url) or process.poll() is not None, timeout=60, what="gunicorn")
            assert process.poll() is None, log_path.read_text()
            wait_until(
                lambda: log_path.read_text().count("Booting worker") >= 3,
                timeout=60,
                what="3 gunicorn workers",
            )
            found = re.search(r"Prometheus multiprocess directory: (\S+)", log_path.read_text())
            assert found, log_path.read_text()
            yield url, Path(found[1])
        finally:
            process.send_signal(signal.SIGQUIT)  # gunicorn's quick shutdown: nothing to drain
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if found is not None and process.returncode == 0:  # a killed master cannot clean up
        assert not Path(found[1]).exists(), "the master's metrics directory was not removed"


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _scraped(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == ANSWERS and sample.labels == HEALTHZ:
                return sample.value
    return 0.0


def _per_worker(metrics_dir: Path) -> dict[str, float]:
    """The healthz answers counted in each worker's own file: ``{pid: count}``."""
    counts: dict[str, float] = {}
    for path in metrics_dir.glob("counter_*.db"):
        for metric in MultiProcessCollector.merge([str(path)]):
            for sample in metric.samples:
                if sample.name == ANSWERS and sample.labels == HEALTHZ and sample.value:
                    counts[path.stem.removeprefix("counter_")] = sample.value
    return counts


def test_one_scrape_counts_the_requests_of_every_worker(web):
    """Requests on new connections spread over the workers (each file counts its own); every
    scrape, whichever worker answers it, reports their sum."""
    url, metrics_dir = web

    def get(_: int) -> int:
        return httpx.get(f"{url}/healthz", timeout=10).status_code

    with ThreadPoolExecutor(6) as pool:
        for _ in range(20):  # until at least two workers answered, at most 20 rounds of 30
            assert set(pool.map(get, range(30))) == {200}
            if len(_per_worker(metrics_dir)) >= 2:
                break
    per_worker = _per_worker(metrics_dir)
    assert len(per_worker) >= 2, per_worker
    total = sum(per_worker.values())
    scrapes = [_scraped(url) for _ in range(6)]
    assert scrapes == [total] * 6, (scrapes, per_worker)


def test_every_worker_publishes_its_run_slots_and_a_scrape_adds_them_up(web):
    """Each worker's thread sets ``payments_web_run_slot_requests{state}`` (its run slots,
    observability/run_slot_metrics.py) in a file of its own; a scrape reports one sample per
    state, the live workers added up: idle, nothing queued or lent."""
    url, metrics_dir = web
    wait_until(
        lambda: len(list(metrics_dir.glob("gauge_livesum_*.db"))) >= 3,
        timeout=30,
        what="three workers' run-slot gauges",
    )
    states = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        if family.name == "payments_web_run_slot_requests":
            states = {sample.labels["state"]: sample.value for sample in family.samples}
    assert set(states) == {"running", "lent", "queued"}, states
    assert states["queued"] == 0 and states["lent"] == 0 and 0 <= states["running"] <= 3


def test_the_celery_worker_serves_the_counts_of_its_pool_processes(transactional_db, tmp_path):
    """A prefork worker (2 pool processes) with CELERY_METRICS_PORT: the tasks run in the pool
    processes, and the worker's exposition (served by its main process) counts all of them."""
    port = free_port()
    env = service_env(CELERY_METRICS_PORT=str(port), PROMETHEUS_MULTIPROC_DIR=None)
    command = [
        *(arg for arg in CELERY_WORKER if arg not in {"--pool", "solo"}),
        "--pool", "prefork", "--concurrency", "2",
    ]  # fmt: skip
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _worker_metrics(port) is not None, timeout=60, what="worker metrics")
            # Not the current app: the service's tasks keep publishing through config.celery_app.
            with Celery(broker=env["CELERY_BROKER_URL"], set_as_current=False) as producer:
                for i in range(6):  # unknown payments: each run counts one not_claimed
                    producer.send_task(
                        "payments.tasks.reconcile_payment",
                        args=[f"pay_{i:024x}"],
                        queue=env["CELERY_DEFAULT_QUEUE"],
                    )
            wait_until(
                lambda: _worker_metrics(port) == 6,
                timeout=60,
                what=f"6 reconciliations counted:\n{log_path.read_text()}",
            )
            # A prefork worker runs every task in a pool process, a child of the main one.
            pool_processes = psutil.Process(worker.pid).children()
        finally:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
    assert len(pool_processes) >= 2, pool_processes


def _worker_metrics(port: int) -> float | None:
    """The worker's count of not_claimed reconciliations, None while it does not answer."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.TransportError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "payments_reconciliation_outcomes_total" and sample.labels == {
                "result": "not_claimed"
            }:
                return sample.value
    return 0.0

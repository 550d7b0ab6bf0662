"""The Procfile's webhooks worker (ADR 0050), as a real process: Celery's threads pool, the
webhook queues only, its database connections from a pool.

One process holds many deliveries to slow endpoints at once (each task sends one delivery at a
time here, ``WEBHOOK_DELIVERY_THREADS=1``, so the overlap is the pool's threads), within the
per-endpoint cap, while an endpoint that hangs holds back no other endpoint's; its connections
to PostgreSQL stay within its pool's size meanwhile; and a worker SIGKILLed mid-attempt leaves
its delivery to the next one. A receiver that holds requests until the test lets them go makes
every assertion a count, never a time.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from celery import Celery
from django.db import connection

from merchants.models import Merchant
from tests.support.holding_receiver import HoldingReceiver, holding_receiver
from tests.support.processes import ROOT, STARTUP_SECONDS, service_env, wait_until
from tests.support.webhook_events import event_written
from tests.unit.test_layout import procfile_commands
from webhooks.models import Delivery
from webhooks.services import endpoint_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: The pool's size in these runs: below the deliveries held at once, so the bound shows.
POOL_MAX = 3


def webhooks_worker(env: dict[str, str], log: Path, *, beat: bool = False) -> subprocess.Popen:
    """The Procfile's ``webhooks`` command (``env NAME=value ... celery ...``) with this
    interpreter, in its own process group; with ``beat``, an embedded beat (the sweep; a child
    process with connections of its own)."""
    argv = shlex.split(procfile_commands()["webhooks"])
    assert argv[0] == "env" and "--pool" in argv and argv[argv.index("--pool") + 1] == "threads"
    celery = argv.index("celery")
    assignments = dict(word.split("=", 1) for word in argv[1:celery])
    assert assignments == {"WORKER_QUEUES": "webhooks"}
    command = [sys.executable, "-m", *argv[celery:]]
    if beat:
        command += ["--beat", "--schedule", f"{log}.beat"]
    return subprocess.Popen(
        command, cwd=ROOT, env={**env, **assignments}, stdout=log.open("w"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def beat(env: dict[str, str], log: Path) -> subprocess.Popen:
    """The Procfile's beat (the sweep every ``WEBHOOK_SWEEP_INTERVAL_SECONDS``), its own
    process with its own connections (another ``application_name``)."""
    argv = shlex.split(procfile_commands()["beat"])
    argv[argv.index("--schedule") + 1] = f"{log}.schedule"
    return subprocess.Popen(
        [sys.executable, "-m", *argv], cwd=ROOT, env={**env, "PGAPPNAME": "webhooks-test-beat"},
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(15)


def worker_env(**overrides: str) -> dict[str, str]:
    return service_env(
        PGAPPNAME=f"webhooks-{uuid.uuid4().hex[:12]}",
        DATABASE_POOL_MAX_SIZE=str(POOL_MAX),
        DATABASE_POOL_MIN_SIZE="1",
        WEBHOOK_DELIVERY_THREADS="1",
        WEBHOOK_SWEEP_INTERVAL_SECONDS="1",
        **overrides,
    )


def send_event_tasks(env: dict[str, str], event_ids: list[str]) -> None:
    """Each event's task, on the worker's broker and event queue, as the outbox enqueues it."""
    queue = f"{env['CELERY_DEFAULT_QUEUE']}.webhook-events"
    with Celery(broker=env["CELERY_BROKER_URL"], set_as_current=False) as producer:
        for event_id in event_ids:
            producer.send_task("webhooks.tasks.deliver_event", args=[event_id], queue=queue)


def endpoint_of(receiver: HoldingReceiver, group: str, name: str = "0") -> Merchant:
    merchant = Merchant.objects.create(name=f"worker-{group}-{name}")
    endpoint_create(merchant=merchant, url=receiver.url(group, name), enabled_events=["*"])
    return merchant


def connections_of(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def child_processes(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = (entry / "status").read_text()
                if f"\nPPid:\t{pid}\n" in status:
                    children.append(int(entry.name))
    return children


@pytest.mark.timeout(400)  # two waits of STARTUP_SECONDS on a loaded machine
def test_one_process_holds_many_deliveries_within_the_caps_and_its_pool(tmp_path):
    """Six slow endpoints (one event each) and a capped one (four events) hold their requests;
    three quick endpoints' events (one each) are delivered meanwhile. At that moment one
    process with no child holds eight requests (the capped endpoint two, its cap: the two
    other tasks found it full and ended), with at most ``POOL_MAX`` connections to PostgreSQL.
    Released, everything is delivered (the capped endpoint's last two by the sweep, which the
    Procfile's beat sends), the capped endpoint never more than two at once."""
    env = worker_env(WEBHOOK_TIMEOUT_SECONDS="100", WEBHOOK_LEASE_SECONDS="300")
    with holding_receiver() as receiver:
        slow = [endpoint_of(receiver, "slow", str(n)) for n in range(6)]
        capped = endpoint_of(receiver, "capped")
        quick = [endpoint_of(receiver, "quick", str(n)) for n in range(3)]
        for group in ("slow", "capped"):
            receiver.hold(group)
        events = [event_written(m.pk, f"pay_s{n}").id for n, m in enumerate(slow)]
        events += [event_written(capped.pk, f"pay_c{n}").id for n in range(4)]
        quick_events = [event_written(m.pk, f"pay_q{n}").id for n, m in enumerate(quick)]
        worker = webhooks_worker(env, tmp_path / "webhooks.log")
        sweeps = beat(env, tmp_path / "beat.log")
        try:
            send_event_tasks(env, events + quick_events)
            try:
                wait_until(
                    lambda: receiver.held("slow") == 6 and receiver.held("capped") == 2
                    and Delivery.objects.filter(
                        event_id__in=quick_events, status="delivered").count() == 3,
                    timeout=STARTUP_SECONDS, what="eight held and the quick three delivered",
                )  # fmt: skip
            except AssertionError as exc:
                held = (receiver.held("slow"), receiver.held("capped"), receiver.answered("quick"))
                log = (tmp_path / "webhooks.log").read_text()[-5000:]
                raise AssertionError(f"{exc}; held, quick: {held}\n{log}") from None
            assert sorted(receiver.answered("quick")) == sorted(quick_events)
            assert 1 <= connections_of(env["PGAPPNAME"]) <= POOL_MAX
            assert child_processes(worker.pid) == []
            receiver.release()
            try:
                wait_until(
                    lambda: Delivery.objects.filter(status="delivered").count() == 13,
                    timeout=STARTUP_SECONDS, what="every delivery",
                )  # fmt: skip
            except AssertionError as exc:
                rows = list(
                    Delivery.objects.values_list(
                        "event_id", "status", "attempts", "lease_until", "next_attempt_at"
                    )
                )
                log = (tmp_path / "webhooks.log").read_text()[-6000:]
                raise AssertionError(f"{exc}: {rows}\n{log}") from None
            assert connections_of(env["PGAPPNAME"]) <= POOL_MAX
        finally:
            kill_group(sweeps)
            kill_group(worker)
    assert receiver.peak("slow") == 6
    assert receiver.peak("capped") == 2
    assert len(receiver.answered("capped")) == 4


def test_a_killed_webhooks_worker_leaves_its_delivery_to_the_next(tmp_path):
    """SIGKILL while the receiver holds the attempt; a new worker delivers the event again once
    the lease runs out, with the same webhook-id."""
    env = worker_env(WEBHOOK_LEASE_SECONDS="2", WEBHOOK_TIMEOUT_SECONDS="30")
    with holding_receiver() as receiver:
        merchant = endpoint_of(receiver, "kill")
        receiver.hold("kill")
        event = event_written(merchant.pk, "pay_k")
        first = webhooks_worker(env, tmp_path / "first.log", beat=True)
        try:
            wait_until(
                lambda: receiver.held("kill") == 1, timeout=STARTUP_SECONDS,
                what="the first worker's attempt:\n" + (tmp_path / "first.log").read_text(),
            )  # fmt: skip
        finally:
            kill_group(first)  # while the receiver holds the request open
        assert Delivery.objects.get().status == "pending"
        receiver.release("kill")
        second = webhooks_worker(env, tmp_path / "second.log", beat=True)
        try:
            wait_until(
                lambda: Delivery.objects.get().status == "delivered", timeout=STARTUP_SECONDS,
                what="the next worker's delivery:\n" + (tmp_path / "second.log").read_text(),
            )  # fmt: skip
        finally:
            kill_group(second)
        assert event.id in receiver.answered("kill")
        assert set(receiver.answered("kill")) == {event.id}

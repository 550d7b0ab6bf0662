"""observability.run_slot_metrics: a web worker's run-slot counts as the gauge
``payments_web_run_slot_requests{state}``, read from a real `RunSlotPool`."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Gauge

from observability.run_slot_metrics import RUN_SLOT_STATES, publish_run_slots
from resilience import RunSlotPool

WAIT = 10.0  # seconds a test waits for a thread before failing; never a measured time


def fresh_gauge() -> tuple[Gauge, CollectorRegistry]:
    registry = CollectorRegistry()
    gauge = Gauge("run_slot_requests", "test", ["state"], registry=registry)
    return gauge, registry


def values(registry: CollectorRegistry) -> dict[str, float | None]:
    return {
        s: registry.get_sample_value("run_slot_requests", {"state": s}) for s in RUN_SLOT_STATES
    }


def test_the_gauge_shows_a_pools_running_and_queued_requests():
    """One slot: a request holding it and one queued behind it read as running 1, queued 1;
    the loop sets the gauge, then waits, and stops when the wait says so."""
    gauge, registry = fresh_gauge()
    pool = RunSlotPool(max_workers=4, run_slots=1, watcher=False)
    started, finish = threading.Event(), threading.Event()

    def holding() -> None:
        started.set()
        assert finish.wait(WAIT)

    first, second = pool.submit(holding), pool.submit(lambda: None)
    try:
        assert started.wait(WAIT)
        waits: list[float] = []

        def wait_once(seconds: float) -> bool:
            waits.append(seconds)
            return True  # stop after one setting

        publish_run_slots(pool.snapshot, wait_once, gauge=gauge)
        assert values(registry) == {"running": 1.0, "lent": 0.0, "queued": 1.0}
        assert waits == [1.0]
    finally:
        finish.set()
        first.result(WAIT)
        second.result(WAIT)
        pool.shutdown()
    publish_run_slots(pool.snapshot, lambda seconds: True, gauge=gauge)
    assert values(registry) == {"running": 0.0, "lent": 0.0, "queued": 0.0}


def test_a_snapshot_that_fails_keeps_the_last_values_and_the_loop_going(caplog):
    """A snapshot that raises is logged and leaves the gauge as it was; the next one sets it."""
    gauge, registry = fresh_gauge()
    gauge.labels(state="running").set(3)
    answers = iter(
        [RuntimeError("pool gone"), type("Counts", (), {"running": 2, "lent": 5, "queued": 0})()]
    )

    def snapshot():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    rounds = iter([False, True])
    seen: list[float | None] = []

    def wait(seconds: float) -> bool:
        seen.append(registry.get_sample_value("run_slot_requests", {"state": "running"}))
        return next(rounds)

    publish_run_slots(snapshot, wait, interval=0.5, gauge=gauge)
    assert seen == [3.0, 2.0]
    assert [
        r.getMessage() for r in caplog.records if r.name == "observability.run_slot_metrics"
    ] == ["run-slot snapshot failed; the gauge keeps its last values"]
    assert values(registry) == {"running": 2.0, "lent": 5.0, "queued": 0.0}

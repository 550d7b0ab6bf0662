"""resilience.RunSlotPool: at most N tasks run, a waiting task lends its slot once its wait is
due, and goes on without queueing when the wait ends (ADR 0053).

The lends are driven by hand (``watcher=False``, ``lend_due()`` on an injected clock), so no
test depends on how fast a thread is scheduled; the tasks are real threads that block on
events the test sets. One test runs the watcher thread itself, on the real clock, and only
waits for its effect.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest

from resilience import RunSlotPool, RunSlotSnapshot, run_slot_lent

WAIT = 10.0  # seconds a test waits for a thread before failing; never a measured time


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Wait (up to WAIT) until ``predicate()`` holds: for a thread's bookkeeping to land."""
    done = threading.Event()
    for _ in range(int(WAIT / 0.005)):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError(f"timed out waiting for {what}")


class Task:
    """A task that records its start, optionally waits in ``run_slot_lent()`` (after
    ``go_wait`` is set, when given) until ``resume`` is set, then runs until ``finish`` is
    set."""

    def __init__(self, *, lends: bool = False, go_wait: threading.Event | None = None) -> None:
        self.lends = lends
        self.go_wait = go_wait
        self.started = threading.Event()
        self.waiting = threading.Event()
        self.resumed = threading.Event()
        self.resume = threading.Event()
        self.finish = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        if self.go_wait is not None:
            assert self.go_wait.wait(WAIT)
        if self.lends:
            with run_slot_lent():
                self.waiting.set()
                assert self.resume.wait(WAIT)
            self.resumed.set()
        assert self.finish.wait(WAIT)
        return "done"


@contextmanager
def pool_of(**kwargs) -> Iterator[tuple[RunSlotPool, Clock]]:
    clock = Clock()
    options = {"max_workers": 8, "run_slots": 1, "watcher": False, "clock": clock, **kwargs}
    pool = RunSlotPool(**options)
    try:
        yield pool, clock
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def snapshot_is(pool: RunSlotPool, **expected: int) -> Callable[[], bool]:
    def check() -> bool:
        now = pool.snapshot()
        return all(getattr(now, name) == value for name, value in expected.items())

    return check


def test_at_most_run_slots_tasks_run_at_once_and_the_rest_queue():
    with pool_of(run_slots=2) as (pool, _):
        tasks = [Task() for _ in range(5)]
        futures = [pool.submit(task) for task in tasks]
        assert tasks[0].started.wait(WAIT) and tasks[1].started.wait(WAIT)
        eventually(snapshot_is(pool, running=2, queued=3), "two running, three queued")
        assert not any(task.started.is_set() for task in tasks[2:])

        tasks[0].finish.set()
        assert futures[0].result(WAIT) == "done"
        assert tasks[2].started.wait(WAIT)  # first in, first out
        eventually(snapshot_is(pool, running=2, queued=2), "the next task in the freed slot")
        assert not tasks[3].started.is_set()

        for task in tasks:
            task.finish.set()
        assert [f.result(WAIT) for f in futures] == ["done"] * 5
        eventually(snapshot_is(pool, running=0, queued=0, lent=0), "an empty pool")
        # Threads are started as slots need them, not all up front.
        assert pool.snapshot().threads <= 3


def test_a_wait_lends_its_slot_once_lend_after_has_passed_and_goes_on_without_queueing():
    with pool_of(run_slots=1, lend_after=0.01) as (pool, clock):
        waiter, queued = Task(lends=True), Task()
        waiting_future = pool.submit(waiter)
        queued_future = pool.submit(queued)
        assert waiter.waiting.wait(WAIT)

        assert pool.lend_due() == pytest.approx(0.01)  # not yet due: the slot stays
        assert not queued.started.is_set()
        assert pool.snapshot() == RunSlotSnapshot(running=1, lent=0, queued=1, threads=1, idle=0)

        clock.now += 0.01
        pool.lend_due()  # due now: lent
        assert queued.started.wait(WAIT)  # the queued task got the slot
        eventually(snapshot_is(pool, running=1, lent=1, queued=0), "one running, one lent")

        waiter.resume.set()  # the network answered: it goes on at once, without a slot
        assert waiter.resumed.wait(WAIT)
        eventually(snapshot_is(pool, running=1, lent=1), "the waiter on without a slot")
        later = Task()
        later_future = pool.submit(later)
        eventually(snapshot_is(pool, queued=1), "a new task queued for the one slot")

        queued.finish.set()  # the slot frees: the new task takes it, the waiter runs on
        assert queued_future.result(WAIT) == "done"
        assert later.started.wait(WAIT)
        waiter.finish.set()
        later.finish.set()
        assert waiting_future.result(WAIT) == later_future.result(WAIT) == "done"
        eventually(snapshot_is(pool, running=0, lent=0, queued=0), "an empty pool")


def test_a_task_back_from_its_wait_takes_a_free_slot():
    with pool_of(run_slots=1, lend_after=0.0) as (pool, _):
        waiter = Task(lends=True)
        future = pool.submit(waiter)
        assert waiter.waiting.wait(WAIT)
        pool.lend_due()
        eventually(snapshot_is(pool, running=0, lent=1), "the slot lent, nobody queued")
        waiter.resume.set()
        assert waiter.resumed.wait(WAIT)
        eventually(snapshot_is(pool, running=1, lent=0), "the slot taken back")
        waiter.finish.set()
        assert future.result(WAIT) == "done"
        eventually(snapshot_is(pool, running=0), "an empty pool")


def test_a_wait_shorter_than_lend_after_hands_nothing_over():
    with pool_of(run_slots=1, lend_after=0.01) as (pool, clock):
        waiter, queued = Task(lends=True), Task()
        pool.submit(waiter)
        queued_future = pool.submit(queued)
        assert waiter.waiting.wait(WAIT)
        clock.now += 0.005
        waiter.resume.set()  # answered within 5 ms
        assert waiter.resumed.wait(WAIT)
        clock.now += 0.05
        pool.lend_due()  # the lend was cancelled when the wait ended: nothing is due
        assert not queued.started.is_set()
        assert pool.snapshot().queued == 1

        waiter.finish.set()  # its slot frees when it finishes
        assert queued.started.wait(WAIT)
        queued.finish.set()
        assert queued_future.result(WAIT) == "done"


def test_a_due_lend_waits_while_another_task_is_on_the_cpu():
    with pool_of(run_slots=2, lend_after=0.01) as (pool, clock):
        go_wait = threading.Event()
        waiter, computing, queued = Task(lends=True), Task(lends=True, go_wait=go_wait), Task()
        pool.submit(waiter)
        pool.submit(computing)
        queued_future = pool.submit(queued)
        assert waiter.waiting.wait(WAIT) and computing.started.wait(WAIT)
        clock.now += 0.03
        pool.lend_due()  # due, but a task is on the CPU: another would only take turns with it
        assert not queued.started.is_set()
        eventually(snapshot_is(pool, running=2, lent=0, queued=1), "nothing lent yet")

        go_wait.set()  # the computing task waits on the network too: the CPU is free
        assert computing.waiting.wait(WAIT)
        assert queued.started.wait(WAIT)  # the waiter's due lend was made as the CPU freed
        eventually(snapshot_is(pool, lent=1, queued=0), "one slot lent")

        for task in (waiter, computing):
            task.resume.set()
            task.finish.set()
        queued.finish.set()
        assert queued_future.result(WAIT) == "done"
        eventually(snapshot_is(pool, running=0, lent=0, queued=0), "an empty pool")


def test_a_long_wait_lends_its_slot_even_while_another_task_is_on_the_cpu():
    with pool_of(run_slots=2, lend_after=0.01, lend_after_busy=0.05) as (pool, clock):
        waiter, computing, queued = Task(lends=True), Task(), Task()
        futures = [pool.submit(task) for task in (waiter, computing, queued)]
        assert waiter.waiting.wait(WAIT) and computing.started.wait(WAIT)
        clock.now += 0.049
        assert pool.lend_due() == pytest.approx(0.001)  # the busy lend is next
        assert not queued.started.is_set()
        clock.now += 0.002
        pool.lend_due()
        assert queued.started.wait(WAIT)  # the queue moves under a steady load
        waiter.resume.set()
        for task in (waiter, computing, queued):
            task.finish.set()
        assert [f.result(WAIT) for f in futures] == ["done"] * 3


def test_a_slot_held_past_the_hold_limit_is_lent_anyway():
    with pool_of(run_slots=1, hold_limit=1.0) as (pool, clock):
        stuck, queued = Task(), Task()
        stuck_future = pool.submit(stuck)
        queued_future = pool.submit(queued)
        assert stuck.started.wait(WAIT)
        clock.now += 0.5
        assert pool.lend_due() == pytest.approx(0.5)  # half the hold limit to go
        assert not queued.started.is_set()
        clock.now += 0.5
        pool.lend_due()
        assert queued.started.wait(WAIT)  # the stuck task no longer stalls the queue

        stuck.finish.set()  # finishing frees no slot: its slot was lent
        assert stuck_future.result(WAIT) == "done"
        eventually(snapshot_is(pool, running=1, lent=0), "the queued task alone in its slot")
        queued.finish.set()
        assert queued_future.result(WAIT) == "done"
        eventually(snapshot_is(pool, running=0), "an empty pool")


def test_nested_lends_count_as_one():
    with pool_of(run_slots=1, lend_after=0.0) as (pool, _):
        inner_done = threading.Event()

        def nested() -> int:
            with run_slot_lent():
                with run_slot_lent():
                    pass
                inner_done.set()  # still inside the outer wait: the slot stays lent
                pool.lend_due()
                lent_inside = pool.snapshot().lent
            return lent_inside

        assert pool.submit(nested).result(WAIT) == 1
        assert inner_done.is_set()
        eventually(snapshot_is(pool, running=0, lent=0), "an empty pool")


def test_results_and_exceptions_reach_the_futures():
    with pool_of(run_slots=2) as (pool, _):

        def fail() -> None:
            raise LookupError("no such charge")

        assert pool.submit(lambda a, b: a + b, 2, b=3).result(WAIT) == 5
        failed = pool.submit(fail)
        with pytest.raises(LookupError, match="no such charge"):
            failed.result(WAIT)
        assert pool.submit(lambda: "after a failure").result(WAIT) == "after a failure"


def test_shutdown_refuses_new_tasks_and_cancels_the_queued_ones_when_asked():
    pool = RunSlotPool(max_workers=2, run_slots=1, watcher=False)
    running = Task()
    first = pool.submit(running)
    queued: Future = pool.submit(lambda: "never")
    assert running.started.wait(WAIT)
    stopping = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    stopping.start()
    eventually(queued.cancelled, "the queued task cancelled")
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    running.finish.set()
    stopping.join(WAIT)
    assert not stopping.is_alive()  # shutdown(wait=True) returned once the task finished
    assert first.result(0) == "done"


def test_the_watcher_thread_makes_the_lends_on_its_own():
    pool = RunSlotPool(max_workers=4, run_slots=1, lend_after=0.01)
    try:
        waiter, queued = Task(lends=True), Task()
        pool.submit(waiter)
        pool.submit(queued)
        assert queued.started.wait(WAIT)  # no lend_due() call here: the watcher lent the slot
        waiter.resume.set()
        for task in (waiter, queued):
            task.finish.set()
        eventually(snapshot_is(pool, running=0, queued=0), "an empty pool")
    finally:
        pool.shutdown()


def test_run_slot_lent_outside_a_pool_does_nothing():
    ran = []
    with run_slot_lent():
        ran.append(True)
    assert ran == [True]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"run_slots": 0}, "run_slots"),
        ({"max_workers": 0}, "max_workers"),
        ({"lend_after": -0.1}, "lend_after"),
        ({"lend_after": float("nan")}, "lend_after"),
        ({"hold_limit": 0}, "hold_limit"),
        ({"lend_after": 0.1, "lend_after_busy": 0.05}, "lend_after_busy"),
    ],
)
def test_a_bad_configuration_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        RunSlotPool(**{"max_workers": 4, "run_slots": 2, "watcher": False, **options})

"""
Run slots: a thread pool where many tasks may wait on the network and few run (ADR 0053).

A payment request spends a few milliseconds on the CPU and hundreds of milliseconds waiting
for the acquirer. To hold many payments in flight a web process needs many threads; but when
the acquirer answers at once, all of those threads are runnable, and in CPython they take
turns on the GIL: measured, 64 runnable threads per process cost 30-40 % more CPU per payment
than 4, in context switches and cold caches (docs/benchmarks.md).

`RunSlotPool` keeps both. It is a `concurrent.futures.Executor` of up to ``max_workers``
threads, of which at most ``run_slots`` run a task at once; the other tasks wait in a queue,
as data, not as woken threads. A task that is about to wait on the network says so with
`run_slot_lent`::

    with run_slot_lent():
        answer = client.authorize(request)

and its slot may go to a queued task while it waits: not at once, but once the wait has
lasted ``lend_after`` seconds (10 ms by default) and no task of the pool is on the CPU (every
one is waiting on the network), or once it has lasted ``lend_after_busy`` (50 ms) whatever
the CPU does. An acquirer that answers at once therefore costs no hand-over at all, nor does
one delayed a little by a busy CPU, where another running task would only take turns on the
GIL with those already running; a slow one lends the slot 10 ms into the call when the CPU
has nothing else to do, and 50 ms into it at the latest, so queued tasks keep moving under a
steady load. A task coming
back from a wait whose slot was lent never queues (it holds a payment in flight): it takes a
free slot if there is one, and otherwise runs on without one, not counted against the queued
tasks (counted, the tasks coming back from a slow acquirer would keep new ones out for
seconds). So more than ``run_slots`` tasks may run for a while. A task that keeps its slot for
more than ``hold_limit`` seconds without lending it (a slow client's upload, a database pool
wait) has it lent anyway, so a few stuck tasks never stall the queue behind them.

A watcher thread makes the lends when they fall due; `lend_due` is that step alone, for
tests that drive it with an injected clock (``watcher=False``). Outside a pool's thread
`run_slot_lent` does nothing, so code that uses it runs unchanged in Celery or a test.

Plain Python: no framework, no setting, no environment variable. The web server's worker
(``config/gunicorn_worker.py``) builds one pool per process.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from .validate import positive_int, positive_seconds

__all__ = ["RunSlotPool", "RunSlotSnapshot", "run_slot_lent"]

#: ``pool``: the RunSlotPool whose thread this is (set on a pool's threads only).
_local = threading.local()


@dataclass(frozen=True)
class RunSlotSnapshot:
    """A pool's counts at one moment: tasks holding a slot (``running``, those whose lend is
    pending included), tasks waiting with their slot lent (``lent``), tasks ``queued`` for a
    slot, and the pool's ``threads`` (``idle`` of them without a task)."""

    running: int
    lent: int
    queued: int
    threads: int
    idle: int


class _Task:
    """One running task's slot: held since ``since``; in a wait since ``waiting_since``; lent."""

    __slots__ = ("depth", "lent", "since", "waiting_since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.waiting_since: float | None = None
        self.lent = False
        self.depth = 0


_WorkItem = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class RunSlotPool(Executor):
    """A thread pool that runs at most ``run_slots`` tasks at once on up to ``max_workers``
    threads, a task's slot lent while it waits (module docstring).

    ``lend_after``, ``lend_after_busy`` and ``hold_limit`` are seconds (``lend_after_busy``:
    how long a wait lasts before its slot is lent even while other tasks are on the CPU, at
    least ``lend_after``); ``clock`` returns monotonic seconds. With
    ``watcher=False`` no watcher thread starts and lends happen only when `lend_due` is
    called. Raises ``ValueError`` for a count below 1, a negative ``lend_after``, a
    ``lend_after_busy`` below it or a ``hold_limit`` that is not positive, and
    ``RuntimeError`` from `submit` after `shutdown`.
    """

    def __init__(
        self,
        max_workers: int,
        run_slots: int,
        *,
        lend_after: float = 0.01,
        lend_after_busy: float = 0.05,
        hold_limit: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        watcher: bool = True,
        thread_name_prefix: str = "run-slot",
    ) -> None:
        positive_int("max_workers", max_workers)
        positive_int("run_slots", run_slots)
        positive_seconds("lend_after", lend_after, allow_zero=True)
        positive_seconds("lend_after_busy", lend_after_busy, allow_zero=True)
        if lend_after_busy < lend_after:
            raise ValueError("lend_after_busy must be at least lend_after")
        positive_seconds("hold_limit", hold_limit)
        self._max_workers, self._run_slots = max_workers, run_slots
        self._lend_after, self._lend_after_busy = float(lend_after), float(lend_after_busy)
        self._hold_limit = float(hold_limit)
        self._clock = clock
        self._name = thread_name_prefix
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)  # idle threads wait here
        self._lend_ready = threading.Condition(self._lock)  # the watcher waits here
        self._queue: collections.deque[_WorkItem] = collections.deque()
        self._tasks: dict[int, _Task] = {}  # thread id -> its task, while it runs one
        self._running = 0  # tasks whose slot is not lent
        self._busy = 0  # tasks not in a network wait: on the CPU, or about to be
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a task, not yet woken
        self._coming = 0  # threads started or woken for a task, not yet holding one
        self._shutdown = False
        self._watcher_until: float | None = None  # when the watcher wakes; None: not waiting
        self._watcher_waiting = False
        if watcher:
            thread = threading.Thread(target=self._watch, name=f"{self._name}-watcher", daemon=True)
            thread.start()

    # -- the Executor interface ------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn(*args, **kwargs)``; it starts when a slot is free. Returns its Future."""
        future: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit a task after shutdown")
            self._queue.append((future, fn, args, kwargs))
            self._admit()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new task; queued ones still run unless ``cancel_futures``. With ``wait``, returns
        when every thread has finished its task."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()
            self._coming += self._idle
            self._idle = 0
            self._work_ready.notify_all()
            self._lend_ready.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    # -- lending ----------------------------------------------------------------------------

    def lend_due(self) -> float | None:
        """Lend every slot whose lend fell due (``lend_after`` into a wait while no task is on
        the CPU, ``lend_after_busy`` into it in any case, or ``hold_limit`` after the slot was
        taken), start queued tasks in the slots that freed, and return the seconds until the
        next lend falls due (None: none is pending). The watcher's step; a task's wait
        beginning or a task ending, with no task left on the CPU, runs it too."""
        with self._lock:
            return self._lend_due(self._clock())

    def snapshot(self) -> RunSlotSnapshot:
        """The pool's counts now (`RunSlotSnapshot`)."""
        with self._lock:
            return RunSlotSnapshot(
                running=self._running,
                lent=sum(1 for task in self._tasks.values() if task.lent),
                queued=len(self._queue),
                threads=len(self._threads),
                idle=self._idle,
            )

    def _lend_due(self, now: float) -> float | None:
        earliest: float | None = None
        for task in self._tasks.values():
            if task.lent:
                continue
            hold_due = task.since + self._hold_limit
            since = task.waiting_since
            quiet_due = None if since is None else since + self._lend_after
            busy_due = None if since is None else since + self._lend_after_busy
            if (
                hold_due <= now
                or (busy_due is not None and busy_due <= now)
                or (quiet_due is not None and quiet_due <= now and self._busy == 0)
            ):
                task.lent = True
                self._running -= 1
                continue
            due = hold_due if busy_due is None else min(hold_due, busy_due)
            if quiet_due is not None and quiet_due > now and self._busy == 0:
                due = min(due, quiet_due)  # while a task is busy, its end re-checks
            if earliest is None or due < earliest:
                earliest = due
        self._admit()
        return None if earliest is None else earliest - now

    def _lend_now(self) -> None:
        """Under the lock, as the last busy task waits or ends: the lends due, and the watcher
        woken for the next one (none is scheduled while a task is busy)."""
        now = self._clock()
        wait = self._lend_due(now)
        if wait is not None:
            self._wake_watcher(now + wait)

    def _waiting_begins(self) -> None:
        task = self._tasks.get(threading.get_ident())
        if task is None:
            return
        task.depth += 1
        if task.depth > 1:
            return
        self._busy -= 1
        if not task.lent:
            task.waiting_since = self._clock()
            self._wake_watcher(task.waiting_since + self._lend_after_busy)
        if self._busy == 0:  # nothing on the CPU now: lends held back for that are made
            self._lend_now()

    def _waiting_ends(self) -> None:
        task = self._tasks.get(threading.get_ident())
        if task is None or task.depth == 0:
            return
        task.depth -= 1
        if task.depth:
            return
        self._busy += 1
        task.waiting_since = None
        task.since = self._clock()
        if not task.lent:
            self._wake_watcher(task.since + self._hold_limit)
        elif self._running < self._run_slots:  # a free slot: this task takes it back
            task.lent = False
            self._running += 1
            self._wake_watcher(task.since + self._hold_limit)
        # else it runs on without a slot: it holds work in flight and never queues, and it
        # does not keep queued tasks out (counted, it would starve them under a slow acquirer)

    def _wake_watcher(self, due: float) -> None:
        if self._watcher_waiting and (self._watcher_until is None or due < self._watcher_until):
            self._lend_ready.notify()

    def _watch(self) -> None:
        with self._lock:
            while not self._shutdown:
                wait = self._lend_due(self._clock())
                self._watcher_until = None if wait is None else self._clock() + wait
                self._watcher_waiting = True
                self._lend_ready.wait(wait)
                self._watcher_waiting = False

    # -- the threads ------------------------------------------------------------------------

    def _admit(self) -> None:
        """Under the lock: wake or start a thread for each queued task a free slot can take,
        counting the threads already on their way (``_coming``)."""
        wanted = min(self._run_slots - self._running, len(self._queue)) - self._coming
        for _ in range(wanted):
            if self._idle:
                self._idle -= 1
                self._coming += 1
                self._work_ready.notify()
            elif len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                self._coming += 1
                thread.start()
            else:
                return

    def _next(self, coming: bool) -> _WorkItem | None:
        """Under the lock: the next task this thread may run, waiting (idle) until there is one
        and a free slot; None at shutdown once the queue is empty. ``coming``: the thread was
        counted in ``_coming`` (started or woken for a task)."""
        while True:
            if coming:
                self._coming -= 1
                coming = False
            if self._queue and self._running < self._run_slots:
                self._running += 1
                self._busy += 1
                since = self._clock()
                self._tasks[threading.get_ident()] = _Task(since)
                self._wake_watcher(since + self._hold_limit)
                return self._queue.popleft()
            if self._shutdown and not self._queue:
                return None
            self._idle += 1
            self._work_ready.wait()  # woken by _admit or shutdown, which counted it coming
            coming = True

    def _work(self) -> None:
        _local.pool = self
        me = threading.get_ident()
        with self._lock:
            item = self._next(coming=True)
        while item is not None:
            _run(item)
            item = None  # an idle thread keeps no task's objects alive
            with self._lock:
                if not self._tasks.pop(me).lent:
                    self._running -= 1
                self._busy -= 1
                takes_next = bool(self._queue) and self._running < self._run_slots
                if self._busy == 0 and not takes_next:  # the CPU is free: held-back lends
                    self._lend_now()
                item = self._next(coming=False)  # this thread first: it is warm


def _run(item: _WorkItem) -> None:
    future, fn, args, kwargs = item
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the Future carries it, as ThreadPoolExecutor's does
        future.set_exception(exc)
    else:
        future.set_result(result)


@contextlib.contextmanager
def run_slot_lent() -> Iterator[None]:
    """Around a network wait (an acquirer call): this task's run slot may go to a queued task
    once the wait has lasted the pool's ``lend_after`` with no task on the CPU, or its
    ``lend_after_busy`` in any case. When the block ends the task goes on at once, in a free
    slot or without one; it never queues. Nested uses count as one. Does nothing outside a
    `RunSlotPool` thread."""
    pool: RunSlotPool | None = getattr(_local, "pool", None)
    if pool is None:
        yield
        return
    with pool._lock:
        pool._waiting_begins()
    try:
        yield
    finally:
        with pool._lock:
            pool._waiting_ends()

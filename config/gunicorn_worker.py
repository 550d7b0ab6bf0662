"""The web process's gunicorn worker: gthread, its threads in run slots (ADR 0053).

gunicorn's ``gthread`` worker hands every request to a thread pool, and lets a subclass choose
the pool (``ThreadWorker.get_thread_pool``). This one gives it a `resilience.RunSlotPool`:
``WEB_THREADS`` threads hold payments in flight while the acquirer thinks, and at most
``WEB_RUN_SLOTS`` of them run at once (default 4, the web process's database pool: a running
request never queues for a connection). A request lends its slot around its acquirer call
(payments/acquirer/connection.py) once the call has lasted
``WEB_RUN_SLOT_LEND_AFTER_SECONDS`` (0.01) and nothing else of the worker is on the CPU, or
``WEB_RUN_SLOT_LEND_AFTER_BUSY_SECONDS`` (0.05) whatever the CPU does; a request that holds a
slot for ``WEB_RUN_SLOT_HOLD_LIMIT_SECONDS`` (1) without lending it has it lent anyway. The
default ``WEB_WORKER_CLASS`` (config/gunicorn.conf.py, ADR 0053).
"""

from __future__ import annotations

import os
import threading

from gunicorn.workers.gthread import ThreadWorker

from resilience import RunSlotPool

__all__ = ["RunSlotThreadWorker", "run_slot_settings"]


def run_slot_settings() -> dict[str, int | float]:
    """The run slots of a web worker from the environment, as `RunSlotPool`'s keyword
    arguments: ``run_slots`` (a count), ``lend_after``, ``lend_after_busy`` and ``hold_limit``
    (seconds). Raises ``ValueError`` for a value that is not a number (the pool refuses one
    out of range)."""
    return {
        "run_slots": int(os.environ.get("WEB_RUN_SLOTS", "4")),
        "lend_after": float(os.environ.get("WEB_RUN_SLOT_LEND_AFTER_SECONDS", "0.01")),
        "lend_after_busy": float(os.environ.get("WEB_RUN_SLOT_LEND_AFTER_BUSY_SECONDS", "0.05")),
        "hold_limit": float(os.environ.get("WEB_RUN_SLOT_HOLD_LIMIT_SECONDS", "1")),
    }


class RunSlotThreadWorker(ThreadWorker):
    """gunicorn's gthread worker with a `RunSlotPool` of ``threads`` threads as its pool, its
    counts published once a second as ``payments_web_run_slot_requests{state}``
    (observability/run_slot_metrics.py)."""

    def get_thread_pool(self) -> RunSlotPool:  # type: ignore[override]
        pool = RunSlotPool(
            max_workers=self.cfg.threads, thread_name_prefix="web", **run_slot_settings()
        )
        # Imported here, in the worker: prometheus_client picks its multiprocess values when
        # first imported, which must be after the master's on_starting set the directory.
        from observability.run_slot_metrics import publish_run_slots

        never = threading.Event()
        threading.Thread(
            target=publish_run_slots,
            args=(pool.snapshot, never.wait),
            name="web-run-slot-metrics",
            daemon=True,
        ).start()
        return pool

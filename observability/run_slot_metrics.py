"""The web worker's run slots as a gauge (ADR 0053): what an operator reads to see whether
requests queue for the CPU.

``payments_web_run_slot_requests{state}``, every live web worker added up (Prometheus
multiprocess mode ``livesum``):

* ``running``: requests holding a run slot (on the CPU, or about to be);
* ``lent``: requests waiting on the acquirer with their slot lent to another;
* ``queued``: requests accepted and waiting for a slot. Above zero for more than a few
  scrapes, the workers' CPU is the bound (docs/scaling.md, "Payments in flight").

Each worker's thread sets it once a second from its pool's snapshot (``publish_run_slots``);
a scrape between two settings reads values up to a second old.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import Gauge

__all__ = ["RUN_SLOT_REQUESTS", "RUN_SLOT_STATES", "publish_run_slots"]

logger = logging.getLogger(__name__)

RUN_SLOT_STATES = ("running", "lent", "queued")

RUN_SLOT_REQUESTS = Gauge(
    "payments_web_run_slot_requests",
    "Web worker requests by run-slot state (running, lent, queued), every live worker added up.",
    ["state"],
    multiprocess_mode="livesum",
)


def publish_run_slots(
    snapshot: Callable[[], Any],
    wait: Callable[[float], bool],
    *,
    interval: float = 1.0,
    gauge: Gauge = RUN_SLOT_REQUESTS,
) -> None:
    """Set ``gauge``'s three states from ``snapshot()`` (an object with ``running``, ``lent``
    and ``queued`` counts, `resilience.RunSlotSnapshot`), then ``wait(interval)`` seconds, until
    ``wait`` returns True (a `threading.Event`'s ``wait``: set it to stop). A snapshot that
    raises is logged and stops nothing: the gauge keeps its last values and the next interval
    tries again."""
    while True:
        try:
            counts = snapshot()
        except Exception:  # a metric never takes the worker's thread down
            logger.warning(
                "run-slot snapshot failed; the gauge keeps its last values", exc_info=True
            )
        else:
            for state in RUN_SLOT_STATES:
                gauge.labels(state=state).set(getattr(counts, state))
        if wait(interval):
            return

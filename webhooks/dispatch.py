"""Many deliveries in flight per process: a sliding window of attempts (ADR 0050).

:func:`deliver_due` keeps up to ``policy.threads`` attempts in flight, each in a thread of its
own (``webhooks.delivery.attempt_claimed``: breaker, one ``POST``, record), and claims again as
soon as one ends, for the slots that are free: there is no batch to wait for, so an endpoint
that hangs holds its own slots (at most ``endpoint_concurrency`` fleet-wide) and nothing else,
and a slow endpoint's answer never delays the next claim. The claims keep every rule of
``webhooks.delivery.claim_due``: round robin across merchants, the per-merchant and
per-endpoint caps counted from live leases in PostgreSQL, leases with a token (a killed worker's
deliveries are taken again when their lease ends).

The database connections this holds: each attempt's thread uses one for its short statements
and, with the psycopg pool (``DATABASE_POOL``, on in the webhooks worker), gives it back before
the call and at its end, so a process holds at most ``DATABASE_POOL_MAX_SIZE`` whatever its
attempts in flight; without a pool, at most one per thread that runs (``threads`` + the
caller's). The webhooks worker (Procfile ``webhooks``: Celery's ``threads`` pool) runs many of
these tasks at once in one process; docs/scaling.md has the arithmetic.
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from django.db import connections

from webhooks.delivery import (
    AttemptOutcome,
    DeliveryRuntime,
    attempt_claimed,
    claim_due,
    connection_release_before_call,
)

__all__ = ["deliver_claimed", "deliver_due"]

logger = logging.getLogger(__name__)


def _attempt_in_thread(delivery_id: int, token: str, runtime: DeliveryRuntime):
    try:
        return attempt_claimed(delivery_id, token, runtime)
    except Exception:  # one delivery's bug must not stop the others; its lease runs out
        logger.exception("webhook delivery %s failed unexpectedly", delivery_id)
        return None
    finally:
        connections.close_all()  # this thread's connections only (back to the pool, if any)


def deliver_claimed(
    ids: list[int], token: str, *, runtime: DeliveryRuntime
) -> list[AttemptOutcome | None]:
    """Send the claimed deliveries ``ids`` (leased under ``token``), each in its own thread (at
    most ``policy.threads`` at once), and record each. Returns each one's outcome, in the order
    of ``ids``."""
    if len(ids) <= 1 or runtime.policy.threads <= 1:
        return [attempt_claimed(delivery_id, token, runtime) for delivery_id in ids]
    with ThreadPoolExecutor(max_workers=min(len(ids), runtime.policy.threads)) as pool:
        return list(pool.map(lambda i: _attempt_in_thread(i, token, runtime), ids))


def deliver_due(
    *,
    runtime: DeliveryRuntime | None = None,
    event_id: str | None = None,
    budget_seconds: float = 0.0,
) -> list[AttemptOutcome | None]:
    """Claim due deliveries (of ``event_id`` only, when given) and send them, up to
    ``policy.threads`` in flight, claiming again for the free slots each time one ends.

    Claims stop when a claim finds nothing while nothing is in flight (nothing is due that the
    caps allow), or once ``budget_seconds`` (monotonic) have passed since the start: with the
    default 0, one claim only (the beat sweep and the event task pass
    ``WEBHOOK_SWEEP_BUDGET_SECONDS``). The attempts in flight then finish, each within its
    timeouts. Returns every attempt's outcome in the order they were claimed (None for one not
    sent: see ``attempt_claimed``).
    """
    runtime = runtime or DeliveryRuntime.from_settings()
    policy = runtime.policy
    started = runtime.monotonic()
    slots = max(1, policy.threads)
    sent: list[Future[AttemptOutcome | None]] = []
    running: set[Future[AttemptOutcome | None]] = set()
    claiming = True
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="webhook") as pool:
        while claiming or running:
            if claiming and len(running) < slots:
                ids, token = claim_due(
                    now=runtime.clock(),
                    policy=policy,
                    event_id=event_id,
                    limit=slots - len(running),
                )
                claimed = [pool.submit(_attempt_in_thread, i, token, runtime) for i in ids]
                sent += claimed
                running.update(claimed)
                claiming = bool(running)  # nothing claimed and nothing in flight: done
            if claiming and runtime.monotonic() - started >= budget_seconds:
                claiming = False
            if running:
                connection_release_before_call()  # the attempts' threads need connections
                _, running = wait(running, return_when=FIRST_COMPLETED)
    return [future.result() for future in sent]

"""Deferred submission: the sweep that sends ``deferred`` payments at the acquirer's pace.

A deferred payment (``payments.authorization.deferral``) was never sent anywhere. Beat runs
:func:`deferred_sweep` every ``DEFERRED_SWEEP_INTERVAL_SECONDS``; one sweep:

1. fails the payments past ``DEFERRED_MAX_AGE_SECONDS`` (``acquirer_unavailable``), whatever
   the acquirer's state;
2. then, one payment at a time, up to ``DEFERRED_BATCH_SIZE``:

   a. **admission first**, before anything is claimed: some configured acquirer's
      ``authorize`` breaker admits and its shared rate gate is open, and the fleet's own
      submission rate
      (``DEFERRED_SUBMIT_RATE_PER_SECOND``, counted in the shared state store) has room. A
      refusal by the breaker or the gate **stops the batch**; the pace waits for its next
      second. So a backlog drains at the acquirer's pace, never as a storm when it recovers.
   b. **phase 1** (:func:`~payments.authorization.deferral.deferred_take`): claim the most overdue
   one
      (``FOR UPDATE SKIP LOCKED``) and commit it ``processing`` with a ``next_check_at``: if this
      worker dies now, reconciliation resolves it at the acquirer.
   c. **the call**, outside any transaction: :func:`deferred_submit`, the one seam where the
      payment goes to an acquirer (with failover: it was never applied anywhere).
   d. **phase 2**: certainly not applied: back to ``deferred`` with a later ``not_before``
      (full-jitter backoff) and the batch stops; any other outcome is recorded by the create
      flow's own phase 2 (``payments.authorization.create.payment_authorization_record``: approved,
      declined, refused, or unknown and reconciled).

Two sweeps at once take disjoint payments (the row lock), so none is submitted twice; each
submission carries the payment's own acquirer idempotency key. The gateway client is the only
layer that retries a call.
"""

from __future__ import annotations

import logging
import random as random_module
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from gateway_client import AcquirerClient
from observability.trace_context import PAYMENT_ID, payment_trace_span
from payments.acquirer.client import acquirer_specs, client_for, shared_state_store
from payments.authorization.create import payment_authorization_record
from payments.authorization.deferral import (
    DeferralPolicy,
    deferred_expire_due,
    deferred_take,
    payment_defer,
)
from payments.authorization.failover import payment_authorize_routed, payment_route
from payments.core.attempts import AcquirerAttempt
from payments.core.crashpoints import crash_point
from payments.models import Payment
from payments.monitoring.metrics import record_deferred_submission, record_deferred_sweep_stop
from resilience import RATE_SCRIPT

__all__ = [
    "DeferredSweepReport",
    "deferred_admission",
    "deferred_submit",
    "deferred_sweep",
]

logger = logging.getLogger(__name__)

#: How long a sweep waits, at most, for the fleet's submission rate to have room again.
_PACE_WAIT_CAP_SECONDS = 1.0


def deferred_submit(client: AcquirerClient | None, payment: Payment) -> AcquirerAttempt:
    """Send the deferred ``payment`` (now ``processing``) to an acquirer and return the last
    classified :class:`~payments.core.attempts.AcquirerAttempt`; never raises a gateway
    error. Outside any transaction. ``client``: a caller's client, used for the acquirer it
    belongs to (None: the process's clients).

    **The seam**: the only place a deferred payment goes to an acquirer. It was never applied
    anywhere, so it is a first attempt with failover
    (:func:`payments.authorization.failover.payment_authorize_routed`): the acquirer it names first
    (with
    its own acquirer idempotency key), then every other acquirer of its route in routing
    order, each only after the one before certainly did not apply it.
    """
    own = payment.acquirer
    order = (own, *(name for name in payment_route(payment) if name != own))
    return payment_authorize_routed(payment, first_attempt=True, route=order, client=client)


@dataclass
class DeferredSweepReport:
    """What one sweep did: the ids ``submitted`` (their outcome recorded), ``deferred_again``
    (certainly not applied), ``expired`` (failed at the maximum age), and ``stopped`` (why the
    batch ended early: ``breaker``, ``rate_gate``, ``refused``; empty when it ran out of due
    payments or reached its batch size)."""

    submitted: list[str] = field(default_factory=list)
    deferred_again: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    stopped: str = ""


def _acquirer_admission(client: AcquirerClient) -> tuple[str, float]:
    admitted, wait = client.admits("authorize")
    if not admitted:
        return "breaker", wait
    closed_for = client.gate.remaining(client.scope)
    if closed_for > 0:
        return "rate_gate", closed_for
    return "", 0.0


def deferred_admission(client: AcquirerClient | None, policy: DeferralPolicy) -> tuple[str, float]:
    """Whether a deferred payment may be submitted now, without taking anything but a pace
    token: ``("", 0.0)`` when some configured acquirer (in routing order; ``client`` in place
    of its own acquirer's) would take a call; else the reason and seconds to wait (the
    shortest among them): ``breaker`` (every ``authorize`` breaker refuses), ``rate_gate``
    (the quota scopes' gates are closed), ``pace`` (``policy.submit_rate`` submissions this
    second already, fleet-wide, in the admitting acquirer's scope)."""
    refusals = []
    for spec in acquirer_specs():
        current = client_for(spec.name, client)
        reason, wait = _acquirer_admission(current)
        if not reason:
            break
        refusals.append((wait, reason))
    else:
        wait, reason = min(refusals)
        return reason, wait
    if policy.submit_rate > 0:
        allowed, _, reset, _ = shared_state_store().run(
            RATE_SCRIPT, [f"deferred_submit:{current.scope}"], [policy.submit_rate, 1, 0]
        )
        if not allowed:
            return "pace", reset
    return "", 0.0


def deferred_sweep(
    *,
    client: AcquirerClient | None = None,
    policy: DeferralPolicy,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
    sleep: Callable[[float], None] = time.sleep,
    submit: Callable[[AcquirerClient | None, Payment], AcquirerAttempt] = deferred_submit,
) -> DeferredSweepReport:
    """One sweep of the due deferred payments (see the module's docstring); returns what it did.

    ``clock`` (aware datetimes), ``random`` (the backoff's jitter, [0, 1)) and ``sleep``
    (seconds, the pace's wait) are injected; ``submit`` is :func:`deferred_submit`'s seam.
    Outside any transaction. Never raises for an acquirer failure.
    """
    report = DeferredSweepReport()
    report.expired.extend(deferred_expire_due(now=clock(), policy=policy))
    handled = 0
    while handled < policy.batch_size:
        reason, wait = deferred_admission(client, policy)
        if reason == "pace":
            sleep(min(max(wait, 0.0), _PACE_WAIT_CAP_SECONDS))
            continue
        if reason:
            report.stopped = reason
            break
        taken = deferred_take(now=clock(), policy=policy)
        if taken is None:
            break
        handled += 1
        payment = taken.payment
        if taken.expired:
            report.expired.append(payment.pk)
            continue
        # In the payment's trace (its request's), linked to the sweep's (ADR 0044).
        with payment_trace_span(
            "payment deferred submit", payment.trace_context, {PAYMENT_ID: payment.pk}
        ):
            crash_point("deferred_after_phase1_commit")
            attempt = submit(client, payment)
            crash_point("deferred_after_acquirer_answer")
            if attempt.outcome.not_applied:
                payment_defer(
                    payment.pk,
                    attempt=attempt,
                    reason=attempt.outcome.value,
                    wait=attempt.retry_after_seconds,
                    now=clock(),
                    policy=policy,
                    random=random,
                )
            else:
                # Every earlier submission was certainly not applied: the first that may be.
                payment_authorization_record(payment.pk, attempt, first_attempt=True, now=clock())
        if attempt.outcome.not_applied:
            report.deferred_again.append(payment.pk)
            report.stopped = "refused"  # the acquirer could not take it: no storm after it
            break
        report.submitted.append(payment.pk)
    for result in ("submitted", "deferred_again", "expired"):
        for _ in getattr(report, result):
            record_deferred_submission(result)
    if report.stopped:
        record_deferred_sweep_stop(report.stopped)
    if report.submitted or report.deferred_again or report.expired:
        logger.info(
            "deferred sweep: %d submitted, %d deferred again, %d expired, stopped=%s",
            len(report.submitted),
            len(report.deferred_again),
            len(report.expired),
            report.stopped or "-",
        )
    return report

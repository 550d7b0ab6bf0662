"""Crash injection for fault campaigns: the process kills itself at a named point.

``PAYMENTS_CRASH_POINT`` names one point; a process that reaches it sends itself SIGKILL (no
cleanup, no rollback handler, like the OOM killer). Off unless set, and always off in
production settings. Every money-moving flow passes the same three phases (:data:`PHASES`),
in this order:

- ``after_phase1_commit``: the key is claimed and the payment (or the operation) committed
  ``processing`` (``pending``); the acquirer was not called.
- ``after_acquirer_answer``: the acquirer answered (maybe charged, captured, voided or
  refunded); nothing recorded yet.
- ``before_phase2_commit``: phase 2 wrote the outcome but has not committed: PostgreSQL rolls
  it back when the connection dies.

The authorization (``POST /payments``) uses the phase names as they are; a capture, void or
refund uses them prefixed with its operation (:data:`OPERATION_CRASH_POINTS`):
``capture_after_phase1_commit``, ``void_after_acquirer_answer``,
``refund_before_phase2_commit``, ... The point names the operation, so one process can crash
every capture while authorizing normally (a campaign needs the payment before its capture, and
a captured payment before its refund).

A failover adds ``after_acquirer_switch`` (:data:`FAILOVER_CRASH_POINTS`): the payment was
moved to the next acquirer and committed, and nothing was sent there yet.

Reconciliation must resolve every payment and operation left behind, once.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

__all__ = [
    "AUTHORIZATION_CRASH_POINTS",
    "CRASH_POINTS",
    "DEFERRED_CRASH_POINTS",
    "FAILOVER_CRASH_POINTS",
    "OPERATIONS",
    "OPERATION_CRASH_POINTS",
    "PHASES",
    "crash_point",
]

#: The three phases of every flow, in the order a request passes them.
PHASES = ("after_phase1_commit", "after_acquirer_answer", "before_phase2_commit")
#: The operations after the authorization (``payments.models.OperationKind`` values).
OPERATIONS = ("capture", "void", "refund")
#: The authorization's points: the phase names themselves.
AUTHORIZATION_CRASH_POINTS = PHASES
#: ``<operation>_<phase>`` for every operation and phase, operation by operation.
OPERATION_CRASH_POINTS = tuple(f"{kind}_{phase}" for kind in OPERATIONS for phase in PHASES)
#: The deferred sweep's (``payments.authorization.deferred_sweep``): after the ``deferred ->
#: processing`` commit,
#: before the call; after the acquirer's answer, before the outcome is recorded.
DEFERRED_CRASH_POINTS = ("deferred_after_phase1_commit", "deferred_after_acquirer_answer")
#: A failover's point (payments/authorization/failover.py): the switch to the next acquirer is
#: committed,
#: nothing was sent there yet; reconciliation must look at the new acquirer.
FAILOVER_CRASH_POINTS = ("after_acquirer_switch",)
#: Every valid value of ``PAYMENTS_CRASH_POINT``.
CRASH_POINTS = (
    AUTHORIZATION_CRASH_POINTS
    + OPERATION_CRASH_POINTS
    + DEFERRED_CRASH_POINTS
    + FAILOVER_CRASH_POINTS
)


def crash_point(name: str) -> None:
    """SIGKILL this process if ``settings.PAYMENTS_CRASH_POINT == name``; otherwise nothing.

    ``name`` is one of :data:`CRASH_POINTS` (else ``ValueError``, so a misspelt point in the
    code fails every test that passes it instead of never firing)."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    if name == settings.PAYMENTS_CRASH_POINT:
        os.kill(os.getpid(), signal.SIGKILL)

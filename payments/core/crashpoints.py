"""Crash injection for fault campaigns: the process kills itself at a named point.

``PAYMENTS_CRASH_POINT`` names one point, or several separated by commas; a process that
reaches one sends itself SIGKILL (no cleanup, no rollback handler, like the OOM killer). Off
unless set, and always off in production settings. Every money-moving flow passes the same
three phases (:data:`PHASES`), in this order:

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
a captured payment before its refund), and one process can crash each kind of request at a
point of its own (``after_phase1_commit,capture_after_phase1_commit,void_after_phase1_commit``):
one gunicorn serves what would otherwise take one per point.

A failover adds ``after_acquirer_switch`` (:data:`FAILOVER_CRASH_POINTS`): the payment was
moved to the next acquirer and committed, and nothing was sent there yet.

Reconciliation must resolve every payment and operation left behind, once.
"""

from __future__ import annotations

import os
import signal
from functools import lru_cache

from django.conf import settings

__all__ = [
    "AUTHORIZATION_CRASH_POINTS",
    "CRASH_POINTS",
    "DEFERRED_CRASH_POINTS",
    "FAILOVER_CRASH_POINTS",
    "OPERATIONS",
    "OPERATION_CRASH_POINTS",
    "PHASES",
    "armed_crash_points",
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
#: Every point ``PAYMENTS_CRASH_POINT`` may name.
CRASH_POINTS = (
    AUTHORIZATION_CRASH_POINTS
    + OPERATION_CRASH_POINTS
    + DEFERRED_CRASH_POINTS
    + FAILOVER_CRASH_POINTS
)


def crash_point(name: str) -> None:
    """SIGKILL this process if ``settings.PAYMENTS_CRASH_POINT`` names ``name``; otherwise
    nothing.

    ``name`` is one of :data:`CRASH_POINTS`, and so is every point the setting names (else
    ``ValueError``, so a misspelt point in the code or in the setting fails the request that
    reaches it instead of never firing)."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    if name in armed_crash_points(settings.PAYMENTS_CRASH_POINT):
        os.kill(os.getpid(), signal.SIGKILL)


@lru_cache(maxsize=8)
def armed_crash_points(setting: str) -> frozenset[str]:
    """The points a ``PAYMENTS_CRASH_POINT`` value names: empty for ``""``, else its
    comma-separated names, spaces around them ignored. Raises ``ValueError`` naming any that is
    not one of :data:`CRASH_POINTS`."""
    names = frozenset(part.strip() for part in setting.split(",") if part.strip())
    unknown = sorted(names - set(CRASH_POINTS))
    if unknown:
        raise ValueError(f"unknown crash points in PAYMENTS_CRASH_POINT: {unknown}")
    return names

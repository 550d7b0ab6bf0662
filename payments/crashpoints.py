"""Crash injection for fault campaigns: the process kills itself at a named point.

``PAYMENTS_CRASH_POINT`` names one point; a process that reaches it sends itself SIGKILL (no
cleanup, no rollback handler, like the OOM killer). Off unless set, and always off in
production settings. The points, in the order a payment passes them:

- ``after_phase1_commit``: the key is claimed and the payment committed ``processing``; the
  acquirer was not called.
- ``after_acquirer_answer``: the acquirer answered (maybe charged); nothing recorded yet.
- ``before_phase2_commit``: phase 2 wrote the outcome but has not committed: PostgreSQL rolls
  it back when the connection dies.

Reconciliation must resolve every payment left behind, once.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

CRASH_POINTS = ("after_phase1_commit", "after_acquirer_answer", "before_phase2_commit")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``settings.PAYMENTS_CRASH_POINT == name``; otherwise nothing."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    if name == settings.PAYMENTS_CRASH_POINT:
        os.kill(os.getpid(), signal.SIGKILL)

"""Record, read and forget heartbeats (``heartbeats.models.Heartbeat``).

Called from the Celery worker's event loop and beat's scheduler (``heartbeats.celery``), so a
failure never propagates: a database error is logged at WARNING and the connection dropped,
so the next beat reconnects. The connection is closed after each write as well: the worker's
parent process forks pool children and must not hold a database socket they would inherit.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime

from django.db import DatabaseError, connection
from django.utils import timezone

from heartbeats.models import Heartbeat

__all__ = ["heartbeat_ages", "heartbeat_forget", "heartbeat_record"]

logger = logging.getLogger(__name__)


def heartbeat_record(kind: str, name: str, *, now: datetime | None = None) -> bool:
    """Upsert ``name``'s heartbeat (``kind`` ``worker`` or ``beat``) at ``now`` (default: the
    clock) with this process's pid. Returns whether it was written; never raises for a
    database error."""
    try:
        Heartbeat.objects.update_or_create(
            name=name,
            defaults={"kind": kind, "pid": os.getpid(), "seen_at": now or timezone.now()},
        )
    except DatabaseError as exc:
        logger.warning("heartbeat of %s not recorded: %s", name, type(exc).__name__)
        return False
    finally:
        _close()
    return True


def heartbeat_forget(name: str) -> None:
    """Delete ``name``'s heartbeat: the process stopped cleanly (a deploy, a scale-down), so
    its silence is no alert. A process that dies keeps its row, and its age grows."""
    try:
        Heartbeat.objects.filter(name=name).delete()
    except DatabaseError as exc:
        logger.warning("heartbeat of %s not forgotten: %s", name, type(exc).__name__)
    finally:
        _close()


def _close() -> None:
    """Drop this process's connection, unless a caller's transaction is using it."""
    if not connection.in_atomic_block:
        connection.close()


def heartbeat_ages(*, now: datetime | None = None) -> list[tuple[str, str, float]]:
    """``(kind, name, seconds since its last heartbeat)`` for every process that ever beat and
    did not stop cleanly, oldest first within each kind. Raises ``DatabaseError``."""
    now = now or timezone.now()
    return [
        (beat.kind, beat.name, max((now - beat.seen_at).total_seconds(), 0.0))
        for beat in Heartbeat.objects.all()
    ]

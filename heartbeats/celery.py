"""The heartbeats of the Celery processes: a consumer bootstep for each worker, a scheduler
for beat. Installed by ``config/celery_app.py`` and ``CELERY_BEAT_SCHEDULER``.

* **Worker**: :class:`HeartbeatStep` runs in the consumer, after the task consumer has
  started, on the worker's event-loop timer every ``HEARTBEAT_INTERVAL_SECONDS``. It stops
  when the consumer stops (a lost broker connection) and starts again with it, so a worker
  that cannot consume, or whose event loop is stuck, or that exited, stops beating.
* **Beat**: :class:`HeartbeatScheduler` is Celery's ``PersistentScheduler`` beating at most
  every ``HEARTBEAT_INTERVAL_SECONDS`` from its tick (it also caps the tick's sleep at that).

A clean stop (``worker_shutdown``, the scheduler's ``close``) deletes the row.

Not at the top: this module is imported with the settings (``config/__init__.py``), before
Django's app registry is ready, and ``heartbeats.services`` imports models. No cycle.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from celery import bootsteps
from celery.beat import PersistentScheduler
from django.conf import settings

__all__ = ["HeartbeatScheduler", "HeartbeatStep", "beat_name", "forget_worker"]


def _record(kind: str, name: str) -> None:
    from heartbeats.services import heartbeat_record

    heartbeat_record(kind, name)


def _forget(name: str) -> None:
    from heartbeats.services import heartbeat_forget

    heartbeat_forget(name)


def beat_name() -> str:
    """The heartbeat name of this host's beat: ``beat@<host name>``."""
    return f"beat@{socket.gethostname()}"


class HeartbeatStep(bootsteps.StartStopStep):
    """A consumer bootstep: the worker's heartbeat, while its consumer runs."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, parent: Any) -> None:
        _record("worker", parent.hostname)
        self.tref = parent.timer.call_repeatedly(
            settings.HEARTBEAT_INTERVAL_SECONDS, _record, ("worker", parent.hostname)
        )

    def stop(self, parent: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop


def forget_worker(sender: Any = None, **kwargs: Any) -> None:
    """``worker_shutdown`` receiver: a worker stopping cleanly deletes its heartbeat."""
    hostname = getattr(sender, "hostname", None)
    if hostname:
        _forget(hostname)


class HeartbeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler, beating from its tick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._next_heartbeat = 0.0
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = float(settings.HEARTBEAT_INTERVAL_SECONDS)
        now = time.monotonic()
        if now >= self._next_heartbeat:
            _record("beat", beat_name())
            self._next_heartbeat = now + interval
        return min(super().tick(*args, **kwargs), interval)

    def close(self) -> None:
        super().close()
        _forget(beat_name())

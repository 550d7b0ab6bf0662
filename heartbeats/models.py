"""One row per long-running process that beats: its last heartbeat."""

from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """The last heartbeat of one process: a Celery worker (``name`` its node name,
    ``celery@host``) or beat (``beat@host``). ``seen_at`` is when it last proved it was doing
    its job (a worker consuming tasks, beat ticking); ``pid`` the process id then."""

    class Kind(models.TextChoices):
        WORKER = "worker", "Celery worker"
        BEAT = "beat", "Celery beat"

    name = models.CharField(max_length=200, primary_key=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    pid = models.PositiveIntegerField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

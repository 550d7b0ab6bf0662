"""``manage.py heartbeat_check KIND [--name NAME] [--max-age SECONDS]``: a health check of the
Celery worker or beat, for a container's healthcheck or a systemd watchdog script.

Exits 0 when the heartbeat (``NAME``'s, else the freshest of ``KIND``) is younger than
``--max-age`` (default four heartbeat intervals), 1 when it is older or missing, 2 when the
database cannot be read. Prints one line saying which.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError

from heartbeats.models import Heartbeat
from heartbeats.services import heartbeat_ages


class Command(BaseCommand):
    help = "Exit 0 if the Celery worker's (or beat's) heartbeat is fresh, 1 if not."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=Heartbeat.Kind.values)
        parser.add_argument("--name", help="one process (celery@host, beat@host); default: any")
        parser.add_argument(
            "--max-age",
            type=float,
            default=None,
            help="seconds (default: 4 x HEARTBEAT_INTERVAL_SECONDS)",
        )

    def handle(self, *args, kind: str, name: str | None, max_age: float | None, **options):
        limit = max_age if max_age is not None else 4 * settings.HEARTBEAT_INTERVAL_SECONDS
        try:
            ages = {n: age for k, n, age in heartbeat_ages() if k == kind}
        except DatabaseError as exc:
            self.stderr.write(f"heartbeats unreadable: {type(exc).__name__}")
            sys.exit(2)
        candidates = {name: ages[name]} if name in ages else {} if name else ages
        if not candidates:
            self.stderr.write(f"no heartbeat of {name or kind}")
            sys.exit(1)
        freshest, age = min(candidates.items(), key=lambda item: item[1])
        if age > limit:
            self.stderr.write(f"{freshest}: last heartbeat {age:.0f} s ago (limit {limit:g} s)")
            sys.exit(1)
        self.stdout.write(f"{freshest}: last heartbeat {age:.1f} s ago")

"""Operator actions on the acquirer client's circuit breakers, each audited in the admin history.

:func:`breaker_force_open`, :func:`breaker_disable` and :func:`breaker_reset` take an endpoint
group (``authorize`` or ``lookup``), the operator (a Django user) and a required note, and return
the group's breaker snapshot before and after. The breaker itself logs the action with the
operator's username and the note (``gateway_client.breaker``, WARNING); the service then writes
one admin ``LogEntry`` (``CHANGE``, content type ``payments | circuitbreaker``, ``object_id`` =
the group) whose message is :func:`breaker_change_summary` and the note. The breaker call (a
Redis round trip) comes first and outside any transaction; the history row is written after it,
in a savepoint.

With a Redis state store the action applies to every process sharing it (``after.store ==
"redis"``); with the in-memory store or Redis' local fallback, to this process only. The reads
are :mod:`payments.acquirer.selectors`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, transaction

from gateway_client import AcquirerClient
from payments.acquirer.client import acquirer_client
from payments.acquirer.selectors import BREAKER_AUDIT_CONTENT_TYPE
from resilience import BreakerSnapshot

__all__ = [
    "BREAKER_ACTION_LABELS",
    "BreakerActionNotAudited",
    "breaker_change_summary",
    "breaker_disable",
    "breaker_force_open",
    "breaker_reset",
]

logger = logging.getLogger(__name__)

#: How each action is named in the admin history and on the console (its button).
BREAKER_ACTION_LABELS = {"force_open": "Force open", "disable": "Disable", "reset": "Reset"}

Change = tuple[BreakerSnapshot, BreakerSnapshot]


class BreakerActionNotAudited(Exception):
    """The action was applied (``before``, ``after``) but its admin-history row could not be
    written (raised ``from`` the ``DatabaseError``); the breaker's own log has the operator and
    the note."""

    def __init__(self, before: BreakerSnapshot, after: BreakerSnapshot) -> None:
        super().__init__(f"breaker action on {after.name}/{after.group} applied but not audited")
        self.before = before
        self.after = after


def breaker_change_summary(action: str, before: BreakerSnapshot, after: BreakerSnapshot) -> str:
    """One line for the history and the console, e.g. ``"Force open circuit breaker
    sandbox/authorize: closed -> forced_open (generation 1, store redis)"``."""
    return (
        f"{BREAKER_ACTION_LABELS[action]} circuit breaker {after.name}/{after.group}: "
        f"{before.state} -> {after.state} (generation {after.generation}, store {after.store})"
    )


def breaker_force_open(
    group: str, *, actor: AbstractBaseUser, note: str, client: AcquirerClient | None = None
) -> Change:
    """Refuse every call of ``group`` without sending it, until someone resets the breaker.

    Returns ``(before, after)`` snapshots. Raises ``ValueError`` for a blank note, ``KeyError``
    for an unknown group, and :class:`BreakerActionNotAudited` when the state changed but the
    admin history could not be written. ``client`` defaults to the process's acquirer client.
    """
    return _operate("force_open", group, actor=actor, note=note, client=client)


def breaker_disable(
    group: str, *, actor: AbstractBaseUser, note: str, client: AcquirerClient | None = None
) -> Change:
    """Admit every call of ``group`` and record nothing (never open) until a reset; retries,
    the retry budget, the rate gate and the concurrency limit still apply. Returns and raises
    as :func:`breaker_force_open`."""
    return _operate("disable", group, actor=actor, note=note, client=client)


def breaker_reset(
    group: str, *, actor: AbstractBaseUser, note: str, client: AcquirerClient | None = None
) -> Change:
    """Clear any override and close ``group``'s breaker with an empty window and a new
    generation. Returns and raises as :func:`breaker_force_open`."""
    return _operate("reset", group, actor=actor, note=note, client=client)


def _operate(
    action: str,
    group: str,
    *,
    actor: AbstractBaseUser,
    note: str,
    client: AcquirerClient | None,
) -> Change:
    if not note.strip():
        raise ValueError("a breaker action needs a note")
    breakers = (client or acquirer_client()).breakers
    operations: dict[str, Callable[..., BreakerSnapshot]] = {
        "force_open": breakers.force_open,
        "disable": breakers.disable,
        "reset": breakers.reset,
    }
    before = breakers[group].snapshot()
    after = operations[action](group, actor=actor.get_username(), reason=note)
    try:
        with transaction.atomic():  # a savepoint: a failed write leaves the caller's work intact
            _audit_record(
                actor, after, f"{breaker_change_summary(action, before, after)}. Note: {note}"
            )
    except DatabaseError as exc:
        logger.exception("the breaker action could not be written to the admin history")
        raise BreakerActionNotAudited(before, after) from exc
    return before, after


def _audit_record(actor: AbstractBaseUser, after: BreakerSnapshot, message: str) -> LogEntry:
    """One admin-history row: who (the user), when (now), why (the note, in the message)."""
    app_label, model = BREAKER_AUDIT_CONTENT_TYPE
    content_type, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    return LogEntry.objects.create(
        user_id=actor.pk,
        content_type=content_type,
        object_id=after.group,
        object_repr=f"circuit breaker {after.name}/{after.group}"[:200],
        action_flag=CHANGE,
        change_message=message,
    )

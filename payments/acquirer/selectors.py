"""Reads of the acquirer client's shared state for the operations console: the circuit breakers,
the rate gate, the retry budget, the AIMD limit, and the admin history of breaker actions.

Every read is free of side effects (read-only scripts or GETs on the state store: nothing is
acquired, refused or counted) and never raises into a page: a failed read is logged and becomes
``None``, ``[]`` or a line in ``errors``, so the payments list and the resilience page render
while Redis or the settings are broken. The actions on the breakers are
:mod:`payments.acquirer.services`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from django.contrib.admin.models import LogEntry
from django.db import DatabaseError
from django.utils import timezone

from gateway_client import AcquirerClient
from payments.acquirer.client import UnknownAcquirer, acquirer_client, acquirer_specs
from resilience import BreakerSnapshot

__all__ = [
    "BREAKER_AUDIT_CONTENT_TYPE",
    "acquirer_client_or_none",
    "acquirer_names",
    "breaker_groups",
    "breaker_history",
    "breaker_snapshot",
    "breakers_not_closed",
    "resilience_state",
]

logger = logging.getLogger(__name__)

#: The admin-history rows of breaker actions: this content type (no model; made by migration
#: 0005, and again by :mod:`payments.acquirer.services` if someone removed it), ``object_id`` =
#: the endpoint group.
BREAKER_AUDIT_CONTENT_TYPE = ("payments", "circuitbreaker")
#: Breaker actions read by :func:`breaker_history` (newest first).
BREAKER_HISTORY_LIMIT = 20

T = TypeVar("T")


def acquirer_client_or_none(name: str | None = None) -> AcquirerClient | None:
    """The process's client of the acquirer ``name`` (None: the first in routing order), or
    None (logged) when the settings cannot build one or name no such acquirer."""
    try:
        return acquirer_client(name)
    except UnknownAcquirer:
        return None
    except Exception:  # settings broken: the page and the list must still render
        logger.exception("the acquirer client could not be built")
        return None


def acquirer_names() -> tuple[str, ...]:
    """The configured acquirers' names in routing order (``()`` when the settings are broken)."""
    try:
        return tuple(spec.name for spec in acquirer_specs())
    except Exception:
        logger.exception("the acquirers could not be read from the settings")
        return ()


def breaker_groups(client: AcquirerClient) -> tuple[str, ...]:
    """The client's endpoint groups (``("authorize", "lookup")``), each with its breaker."""
    return tuple(client.breakers)


def breakers_not_closed() -> list[dict[str, Any]]:
    """Breakers that are not closed, for the payments list's banner: one dict per acquirer and
    group, ``{"acquirer": str, "group": str, "state": str, "refusing": bool}`` (refusing: open
    or forced open, so that acquirer is skipped, and with every acquirer refusing new payments
    are answered 503). Acquirers whose client or state cannot be read are left out."""
    found = []
    for name in acquirer_names():
        client = acquirer_client_or_none(name)
        if client is None:
            continue
        try:
            snapshots = client.breakers.snapshot()
        except Exception:  # a banner is never worth a failed page
            logger.exception("reading the circuit breakers failed")
            continue
        found.extend(
            {
                "acquirer": name,
                "group": group,
                "state": snapshot.state,
                "refusing": snapshot.state in ("open", "forced_open"),
            }
            for group, snapshot in snapshots.items()
            if snapshot.state != "closed"
        )
    return found


def _read(what: str, errors: list[str], read: Callable[[], T]) -> T | None:
    """One read of the resilience state; a failure becomes a line in ``errors``, not a 500."""
    try:
        return read()
    except Exception as exc:
        logger.exception("resilience page: reading the %s failed", what)
        errors.append(f"The {what} could not be read ({type(exc).__name__}).")
        return None


def breaker_snapshot(client: AcquirerClient, group: str) -> BreakerSnapshot | None:
    """One group's breaker snapshot (read-only script), or None (logged) when unreadable.

    Raises ``KeyError`` for a group the client has no breaker for (see :func:`breaker_groups`).
    """
    breaker = client.breakers[group]
    return _read("circuit breaker", [], breaker.snapshot)


def resilience_state(client: AcquirerClient) -> dict[str, Any]:
    """What the resilience page shows, read without side effects.

    Each breaker's snapshot (read-only script), the rate gate (``RateGate.remaining``: a GET),
    the retry budget (``RetryBudget.state``: a read that only drops expired slots) and the AIMD
    limit (``AimdLimiter.snapshot``: a read). Nothing is acquired, refused or counted.

    Returns a dict: ``breakers`` (``[{"group", "snapshot", "config"}]``), ``gate`` (``scope``,
    ``remaining`` seconds, ``closed``, ``not_before`` instant; None when unreadable), ``budget``
    (``retries_available``, ``balance``, ``reserve``, ``ttl`` seconds, ``percent_can_retry``;
    None when unreadable), ``limiter`` (a ``LimiterSnapshot`` or None), ``store_kind``,
    ``memory_store`` and ``fallback_store`` (where the state came from), ``errors`` (one line per
    failed read), ``acquirer`` (its name) and ``read_at``.
    """
    errors: list[str] = []
    snapshots = _read("circuit breakers", errors, client.breakers.snapshot) or {}
    gate_remaining = _read("rate gate", errors, lambda: client.gate.remaining(client.scope))
    budget = client.budget
    budget_state = _read("retry budget", errors, budget.state)
    limiter = _read("concurrency limit", errors, lambda: client.limiter.snapshot(client.scope))
    now = timezone.now()
    stores = {snapshot.store for snapshot in snapshots.values()} or {
        getattr(client.store, "kind", "custom")
    }
    gate = None
    if gate_remaining is not None:
        gate = {
            "scope": client.scope,
            "remaining": gate_remaining,
            "closed": gate_remaining > 0,
            "not_before": now + timedelta(seconds=gate_remaining) if gate_remaining > 0 else None,
        }
    return {
        "breakers": [
            {"group": group, "snapshot": snapshot, "config": client.breakers[group].config}
            for group, snapshot in snapshots.items()
        ],
        "gate": gate,
        "budget": None
        if budget_state is None
        else {
            "name": budget.name,
            "retries_available": budget_state.retries_available,
            "balance": budget_state.balance,
            "reserve": budget.min_retries_per_second * budget.ttl,
            "ttl": budget.ttl,
            "percent_can_retry": budget.percent_can_retry * 100,
        },
        "limiter": limiter,
        "store_kind": getattr(client.store, "kind", "custom"),
        "memory_store": "memory" in stores,
        "fallback_store": "fallback" in stores,
        "errors": errors,
        "acquirer": client.config.name,
        "read_at": now,
    }


def breaker_history(limit: int = BREAKER_HISTORY_LIMIT) -> list[LogEntry]:
    """The newest ``limit`` breaker actions of the admin history (with their user); ``[]``
    (logged) when the database cannot answer."""
    app_label, model = BREAKER_AUDIT_CONTENT_TYPE
    try:
        return list(
            LogEntry.objects.filter(content_type__app_label=app_label, content_type__model=model)
            .select_related("user")
            .order_by("-action_time", "-id")[:limit]
        )
    except DatabaseError:
        logger.exception("reading the breaker actions' history failed")
        return []

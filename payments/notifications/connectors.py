"""The notification connector of each configured acquirer (``gateway_client``'s per provider).

A connector is built from the acquirer's ``AcquirerSpec`` (``type`` and ``webhook_secrets``)
and the ``NOTIFICATION_TOLERANCE_SECONDS`` setting; an acquirer without secrets has none (its
endpoint answers 404). Adyen's takes the secrets as its HMAC keys and its merchant account; it
signs items, not requests, so it has no timestamp to hold to a tolerance.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings

from acquirers.specs import AcquirerSpec
from gateway_client import (
    AdyenNotifications,
    NotificationConnector,
    SandboxNotifications,
    StripeNotifications,
)
from payments.acquirer.client import UnknownAcquirer, acquirer_spec

__all__ = ["notification_connector"]


def notification_connector(
    name: str, *, clock: Callable[[], float] = time.time
) -> NotificationConnector | None:
    """The notification connector of the acquirer ``name``, or None when no such acquirer is
    configured or it has no notification secrets. ``clock``: Unix seconds, for the signature's
    timestamp tolerance."""
    try:
        spec = acquirer_spec(name)
    except UnknownAcquirer:
        return None
    return _connector(spec, clock)


def _connector(spec: AcquirerSpec, clock: Callable[[], float]) -> NotificationConnector | None:
    if not spec.webhook_secrets:
        return None
    tolerance = settings.NOTIFICATION_TOLERANCE_SECONDS
    if spec.type == "adyen":
        return AdyenNotifications(
            spec.webhook_secrets, merchant_account=spec.merchant_account or ""
        )
    if spec.type == "stripe":
        return StripeNotifications(spec.webhook_secrets, tolerance=tolerance, clock=clock)
    return SandboxNotifications(spec.webhook_secrets, tolerance=tolerance, clock=clock)

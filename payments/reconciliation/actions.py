"""Customer actions (3-D Secure by redirect, ADR 0049): a payment the acquirer holds for the
shopper, from ``requires_action`` to its end.

A payment whose authorization the acquirer answered "the shopper must authenticate"
(``gateway_client.ActionRequired``) is ``requires_action`` with the acquirer's page
(``action_url``) and an expiry (``action_expires_at``, ``CUSTOMER_ACTION_EXPIRY_SECONDS`` after
the answer). Three things end it, all through :func:`action_complete`, the same rule:

* the shopper's return to ``GET /payments/return/<token>`` (``payments.api.customer_views``;
  at Adyen, which has no look-up, with the ``redirectResult`` it signed, which only Adyen's
  ``/payments/details`` reads);
* a provider notification about the payment (``payments.notifications.apply``);
* the expiry sweep (:func:`action_expiry_sweep`, beat), for a shopper who never came back.

Each is only a **hint**: the outcome is re-fetched with the acquirer's look-up (Adyen: its
details call), outside any transaction, never read from the shopper's query string or the
notification's body; then
recorded in one short transaction under the payment's row lock, only while the payment is
still ``requires_action`` (:func:`action_outcome_record`). So a return twice, or a return
racing a notification, records the outcome once, with one ``payment.*`` merchant event; the
second finds the payment final and changes nothing.

Expiry: a payment past ``action_expires_at`` is claimed (``FOR UPDATE SKIP LOCKED``, a lease
on ``reconciliation_lease_until``: two sweeps take disjoint payments, a killed one's lease
runs out), looked up first (the shopper may have authenticated without coming back); still
waiting for the shopper, its authorization is voided at the acquirer (our key
``void-<payment id>``) and the payment ends ``canceled`` with an ``action_expired`` event and
``payment.canceled``. A failed look-up or void leaves it for the next sweep, its lease run out.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateway_client import (
    AcquirerClient,
    ActionDetailsRequest,
    ActionRequired,
    Authorization,
    GatewayError,
    PermanentError,
    RetryPolicy,
    VoidRequest,
)
from observability.request_context import current_request_id
from payments.acquirer.client import (
    acquirer_spec,
    api_retry_policy,
    client_for,
    reconciliation_retry_policy,
)
from payments.acquirer.connection import waiting_on_acquirer
from payments.core.payment_states import (
    UnexpectedStatus,
    payment_answer_store,
    payment_lock_with_key,
    payment_transition,
)
from payments.models import CaptureMethod, Payment, PaymentEventType, PaymentStatus

__all__ = [
    "action_complete",
    "action_expire",
    "action_expiry_claim",
    "action_expiry_sweep",
    "action_notified",
    "action_outcome_record",
    "action_required_record",
]

logger = logging.getLogger(__name__)

#: What an action's end may be recorded from: only a payment still waiting for its shopper.
_WAITING = (PaymentStatus.REQUIRES_ACTION,)
#: How long an expiry sweep owns a claimed payment (its look-up and void take seconds).
EXPIRY_LEASE_SECONDS = 120.0


def action_required_record(
    payment_id: str,
    action: ActionRequired,
    *,
    how: str,
    now: datetime,
    expect: tuple[str, ...] = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW),
) -> str | None:
    """Record that the acquirer holds ``payment_id`` for the shopper (found by
    reconciliation's look-up or re-send: ``how``): ``requires_action`` with ``action.url``
    and an expiry ``CUSTOMER_ACTION_EXPIRY_SECONDS`` from ``now``, its event, merchant event
    and refreshed answer. Only from ``expect``; returns the new status, or None when the
    payment was no longer there (nothing written)."""
    expires_at = now + timedelta(seconds=settings.CUSTOMER_ACTION_EXPIRY_SECONDS)
    try:
        with transaction.atomic():
            payment, key = payment_lock_with_key(payment_id, expect=expect)
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.REQUIRES_ACTION,
                event_type=PaymentEventType.ACTION_REQUIRED,
                now=now,
                data={"how": how, "expires_at": expires_at.isoformat()},
                acquirer_reference=action.acquirer_reference,
                action_url=action.url,
                action_expires_at=expires_at,
                next_check_at=None,
                reconciliation_lease_until=None,
            )
            payment_answer_store(payment, key=key, now=now)
    except UnexpectedStatus:
        return None
    return PaymentStatus.REQUIRES_ACTION


def action_outcome_record(
    payment_id: str, found: Authorization, *, how: str, now: datetime
) -> str | None:
    """Record the acquirer's outcome of a customer action, ``found`` by a look-up (``how``:
    ``shopper_return``, ``notification``, ``expiry_lookup``) or a void (``expired``), for a
    payment still ``requires_action``: voided (whether or not the shopper had approved it:
    the authorization is released) -> ``canceled``; approved -> ``succeeded``
    (``requires_capture`` for a manual capture); declined -> ``declined`` with its code.
    In one transaction under the payment's and its key's row locks, with the event, the
    merchant's webhook event and the refreshed answer of the merchant's key. Returns the new
    status, or None when the payment was no longer ``requires_action`` (recorded by another
    path first: nothing written)."""
    changes: dict[str, object] = {
        "acquirer_reference": found.acquirer_reference,
        "reconciliation_lease_until": None,
    }
    if found.voided:
        to_status, event_type = PaymentStatus.CANCELED, PaymentEventType.ACTION_EXPIRED
        changes["decline_code"] = "action_expired"
    elif found.approved:
        to_status, event_type = PaymentStatus.SUCCEEDED, PaymentEventType.ACTION_COMPLETED
    else:
        to_status, event_type = PaymentStatus.DECLINED, PaymentEventType.ACTION_COMPLETED
        changes["decline_code"] = found.decline_code
    try:
        with transaction.atomic():
            payment, key = payment_lock_with_key(payment_id, expect=_WAITING)
            payment_transition(
                payment=payment,
                to_status=to_status,
                event_type=event_type,
                now=now,
                data={"how": how},
                **changes,
            )
            payment_answer_store(payment, key=key, now=now)
    except UnexpectedStatus:
        return None
    logger.info("payment %s customer action ended %s by %s", payment_id, payment.status, how)
    return str(payment.status)


def action_notified(
    payment_id: str,
    *,
    acquirer_reference: str,
    outcome: Literal["approved", "declined", "voided"],
    now: datetime,
) -> str | None:
    """Record the end of ``payment_id``'s customer action that an acquirer without a look-up
    (Adyen) notified, a verified record (ADR 0047): its ``AUTHORISATION`` (``approved`` when
    ``success`` is true, else ``declined`` with the code ``adyen_authorisation``) or the
    ``CANCELLATION`` of the expiry's cancel (``voided``: ``canceled``), for the payment's
    ``acquirer_reference`` (Adyen's ``pspReference``). Through
    :func:`action_outcome_record`: only while the payment is still ``requires_action``, under
    its row lock. Returns the new status; None when the payment no longer waits, or the
    notification is about another payment at the acquirer (nothing written)."""
    payment = Payment.objects.get(pk=payment_id)
    if payment.acquirer_reference != acquirer_reference:
        logger.warning("payment %s: a notified action outcome names another payment", payment_id)
        return None
    found = Authorization(
        acquirer_reference=acquirer_reference,
        approved=outcome == "approved",
        decline_code="adyen_authorisation" if outcome == "declined" else None,
        amount=payment.amount,
        currency=payment.currency,
        payment_reference=payment.pk,
        created_at=now,
        voided=True if outcome == "voided" else None,
    )
    return action_outcome_record(payment_id, found, how="notification", now=now)


def _look_up(
    payment: Payment, client: AcquirerClient, policy: RetryPolicy | None = None
) -> Authorization | ActionRequired | None:
    """The acquirer's authorization of ``payment`` now (None: it has no record), under
    ``policy`` (None: reconciliation's). Outside any transaction (``RuntimeError`` inside
    one), the database connection given back to the pool for the call (ADR 0048); raises
    GatewayError (and LookupUnsupported for a provider without one)."""
    with waiting_on_acquirer():
        found = client.lookup(
            payment.id,
            policy=policy or reconciliation_retry_policy(),
            request_id=current_request_id(),
        )
    return found[0] if found else None


def _details(
    payment: Payment, client: AcquirerClient, redirect_result: str, policy: RetryPolicy | None
) -> Authorization:
    """Adyen's outcome of ``payment``'s action on the ``redirect_result`` the shopper brought
    back (``/payments/details``; Adyen verifies the result it signed), under ``policy`` (None:
    reconciliation's), with the key ``details-<payment id>-<16 hex of its SHA-256>`` (the same
    return sent twice is one request; another result is another). Outside any transaction,
    the connection given back first. Raises GatewayError (a result Adyen refuses, one used
    already, is a PermanentError: no new outcome), ValueError for a result that is not
    printable ASCII of at most 8192 characters, MalformedBody-based errors for an answer
    about another payment."""
    digest = hashlib.sha256(redirect_result.encode("ascii")).hexdigest()[:16]
    request = ActionDetailsRequest(
        payment_reference=payment.pk,
        amount=payment.amount,
        currency=payment.currency,
        capture=payment.capture_method != CaptureMethod.MANUAL,
        redirect_result=redirect_result,
        idempotency_key=f"details-{payment.pk}-{digest}",
    )
    with waiting_on_acquirer():
        found = client.action_details(
            request, policy=policy or reconciliation_retry_policy(), request_id=current_request_id()
        )
    if found.acquirer_reference != payment.acquirer_reference:
        raise ValueError("the details answer names another payment at the acquirer")
    return found


def action_complete(
    payment_id: str,
    *,
    how: str,
    redirect_result: str | None = None,
    client: AcquirerClient | None = None,
    interactive: bool = False,
    clock: Callable[[], datetime] = timezone.now,
) -> str:
    """End ``payment_id``'s customer action if the acquirer has: ask it (outside any
    transaction, at the payment's acquirer; ``client`` when it is that acquirer's; under the
    API's retry policy when ``interactive``, a shopper's browser waiting, else
    reconciliation's) and record the outcome (:func:`action_outcome_record`). Asking is a
    look-up; at an acquirer without one (Adyen) it is the details call with the shopper's
    ``redirect_result`` (:func:`_details`), and without a result there is nothing to ask
    (a notification or the expiry ends the action). Returns the payment's status afterwards:
    still ``requires_action`` when the shopper has not finished or the call failed (logged;
    the return, a notification or the expiry sweep asks again). Never raises for an acquirer
    failure (nor for an acquirer no longer configured); ``Payment.DoesNotExist`` for an
    unknown id."""
    payment = Payment.objects.get(pk=payment_id)
    if payment.status != PaymentStatus.REQUIRES_ACTION:
        return str(payment.status)
    found: Authorization | ActionRequired | None = None
    try:
        policy = api_retry_policy(acquirer_spec(payment.acquirer)) if interactive else None
        acquirer = client_for(payment.acquirer, client)
        if acquirer.dialect.supports_lookup:
            found = _look_up(payment, acquirer, policy)
        elif redirect_result is not None and acquirer.dialect.supports_action_details:
            found = _details(payment, acquirer, redirect_result, policy)
    except (GatewayError, ValueError, LookupError) as exc:
        logger.warning(
            "payment %s customer action look-up failed (%s)", payment_id, type(exc).__name__
        )
        return str(payment.status)
    if isinstance(found, Authorization):
        recorded = action_outcome_record(payment_id, found, how=how, now=clock())
        if recorded is not None:
            return recorded
    return _status(payment_id)


def _status(payment_id: str) -> str:
    """The payment's status as stored now."""
    return str(Payment.objects.values_list("status", flat=True).get(pk=payment_id))


def action_expiry_claim(*, now: datetime, batch_size: int) -> list[str]:
    """Claim up to ``batch_size`` ``requires_action`` payments past ``action_expires_at``,
    oldest first, skipping rows another sweep holds (``FOR UPDATE SKIP LOCKED``) or leases;
    lease them for :data:`EXPIRY_LEASE_SECONDS`. One short transaction; returns their ids."""
    lease_until = now + timedelta(seconds=EXPIRY_LEASE_SECONDS)
    with transaction.atomic():
        ids = list(
            Payment.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(status=PaymentStatus.REQUIRES_ACTION, action_expires_at__lte=now)
            .exclude(reconciliation_lease_until__gt=now)
            .order_by("action_expires_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        Payment.objects.filter(pk__in=ids).update(reconciliation_lease_until=lease_until)
    return ids


def action_expire(
    payment_id: str,
    *,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> str:
    """Expire one claimed ``requires_action`` payment: look it up first (a shopper who
    authenticated and never came back: its outcome is recorded); still waiting, void it at
    the acquirer (key ``void-<payment id>``, the same on every sweep) and record it
    ``canceled``. Outside any transaction. Returns the status afterwards (``requires_action``
    when the look-up or the void failed: the next sweep, once the lease ran out, tries again).
    """
    payment = Payment.objects.get(pk=payment_id)
    if payment.status != PaymentStatus.REQUIRES_ACTION:
        return str(payment.status)
    try:
        acquirer = client_for(payment.acquirer, client)
        found = _look_up(payment, acquirer) if acquirer.dialect.supports_lookup else None
        if isinstance(found, Authorization):
            status = action_outcome_record(payment_id, found, how="expiry_lookup", now=clock())
            return status or _status(payment_id)
        with waiting_on_acquirer():
            voided = acquirer.void(
                VoidRequest(
                    acquirer_reference=payment.acquirer_reference or "",
                    idempotency_key=f"void-{payment.pk}",
                ),
                policy=reconciliation_retry_policy(),
                request_id=current_request_id(),
            )
    except PermanentError as exc:
        # Refused: the acquirer finished the action meanwhile (approved or declined); the next
        # sweep's look-up records it.
        logger.warning("payment %s expiry void refused (%s)", payment_id, exc.status_code)
        return str(payment.status)
    except (GatewayError, ValueError, LookupError) as exc:
        logger.warning("payment %s expiry failed (%s)", payment_id, type(exc).__name__)
        return str(payment.status)
    if not isinstance(voided, Authorization):  # a void answered "received" (Adyen): pending
        return str(payment.status)
    status = action_outcome_record(payment_id, voided, how="expired", now=clock())
    return status or _status(payment_id)


def action_expiry_sweep(
    *,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
    batch_size: int = 20,
) -> dict[str, str]:
    """One sweep of expired customer actions (beat's ``payments.tasks.expire_customer_actions``):
    claim a batch (:func:`action_expiry_claim`) and expire each (:func:`action_expire`).
    ``clock`` (aware datetimes) is injected. Returns payment id -> status afterwards."""
    claimed = action_expiry_claim(now=clock(), batch_size=batch_size)
    done = {pk: action_expire(pk, client=client, clock=clock) for pk in claimed}
    if done:
        logger.info("customer action expiry: %s", sorted(set(done.values())))
    return done

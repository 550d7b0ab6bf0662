"""Authorizing a payment with routing and failover, only when certain (ADR 0023).

:func:`payment_authorize_routed` is the one entry point: the create flow calls it between its
phase 1 and phase 2, and so may any flow that sends a payment nobody has sent yet. It calls the
payment's acquirer (``Payment.acquirer``, chosen by phase 1 from
:func:`~payments.acquirer.routing.acquirer_route`), and only when that attempt certainly did
not apply the payment (:func:`~payments.acquirer.routing.may_fail_over`) and the payment was
never sent anywhere before (``first_attempt``), moves it to the next acquirer of the route that
would not refuse it unsent (:func:`~payments.acquirer.routing.skip_reason`), within the one
request deadline (``ACQUIRER_DEADLINE_SECONDS``: each acquirer gets what remains).

The move is a short transaction of its own (:func:`acquirer_switch`), committed BEFORE the
request goes to the next acquirer: it records the previous acquirer's attempt and names the
next acquirer and its own acquirer idempotency key on the payment row, so a process that dies
after it leaves reconciliation looking at the acquirer that may hold the payment. After an
unknown outcome the payment never moves: it stays (``202``) and is reconciled there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateway_client import AcquirerClient
from observability.trace_context import PAYMENT_ID, tracer
from payments.acquirer.authorize import payment_authorize
from payments.acquirer.client import UnknownAcquirer, client_for
from payments.acquirer.routing import (
    acquirer_idempotency_key,
    acquirer_route,
    may_fail_over,
    skip_reason,
)
from payments.core.attempts import AcquirerAttempt
from payments.core.crashpoints import crash_point
from payments.core.payment_states import payment_event_record, payment_lock
from payments.models import Payment, PaymentEventType, PaymentStatus

__all__ = [
    "acquirer_switch",
    "next_acquirer",
    "payment_authorize_routed",
    "payment_route",
    "route_start",
]

logger = logging.getLogger(__name__)


def payment_authorize_routed(
    payment: Payment,
    *,
    first_attempt: bool,
    route: Sequence[str] | None = None,
    client: AcquirerClient | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    clock: Callable[[], datetime] = timezone.now,
) -> AcquirerAttempt:
    """Authorize ``payment`` (``processing``, committed, naming its acquirer and acquirer
    idempotency key) with routing and failover, and return the LAST attempt, for the caller's
    phase 2 (``payments.authorization.create.payment_authorization_record``) to record.

    ``first_attempt``: nothing of this payment was ever sent (a new idempotency key); a resumed
    payment (a merchant's retry of a ``202``, a key taken over after a crash) passes False and
    is sent to its own acquirer only. ``route``: the acquirer names in routing order (the
    payment's own among them; None: :func:`payment_route`); the payment moves only to names
    after its own. ``client``: a
    caller's client, used when it is the client of the acquirer being called (tests). Outside
    any transaction (``RuntimeError`` from the acquirer call otherwise). ``monotonic``
    (seconds) measures the deadline; ``clock`` stamps the switch.

    Each earlier attempt is recorded by :func:`acquirer_switch` before the next call; the
    returned one is not recorded yet. Raises
    :class:`~payments.acquirer.client.UnknownAcquirer` when the payment's acquirer is not
    configured. Never raises a gateway error.
    """
    deadline = settings.ACQUIRER_DEADLINE_SECONDS
    started = monotonic()
    names = list(route) if route is not None else list(payment_route(payment))
    later = names[names.index(payment.acquirer) + 1 :] if payment.acquirer in names else []
    policy = None  # the first call has the whole deadline: the client's own policy
    while True:
        current = client_for(payment.acquirer, client)
        attempt = payment_authorize(current, payment, policy=policy, monotonic=monotonic)
        if not first_attempt or not may_fail_over(attempt):
            return attempt
        time_left = deadline - (monotonic() - started)
        chosen, skipped, later = next_acquirer(later, client=client, time_left=time_left)
        if chosen is None:
            return attempt
        move = {
            PAYMENT_ID: payment.pk,
            "payments.failover.from": payment.acquirer,
            "payments.failover.to": chosen[0],
            "payments.failover.reason": attempt.outcome.value,
        }
        with tracer.start_as_current_span("payment failover", attributes=move):
            switched = acquirer_switch(
                payment.pk, attempt, from_acquirer=payment.acquirer, to_acquirer=chosen[0],
                skipped=skipped, now=clock(),
            )  # fmt: skip
        if switched is None:
            return attempt  # resolved meanwhile: phase 2 records the attempt, answers the truth
        crash_point("after_acquirer_switch")
        payment = switched
        policy = chosen[1].policy.replace(deadline=time_left)


def payment_route(payment: Payment) -> tuple[str, ...]:
    """The routing order for ``payment`` now: its currency (ISO 4217), capture method, payment
    method (its family, ADR 0051) and its merchant's preferred order
    (:func:`~payments.acquirer.routing.acquirer_route`). A flow that sends a payment later (not
    at its creation) passes this to :func:`payment_authorize_routed`; the payment's own
    acquirer should be its first element that admits it."""
    return acquirer_route(
        currency=payment.currency,
        capture_method=payment.capture_method,
        payment_method=payment.payment_method,
        preferred=payment.merchant.preferred_acquirers,
    )


def route_start(route: Sequence[str], client: AcquirerClient | None) -> tuple[str | None, float]:
    """The first acquirer of ``route`` (names) whose ``authorize`` breaker admits a call, and
    0.0; or None and the shortest wait (seconds) until one of them admits probes. A read of
    the shared breaker state: no permit taken, nothing sent. A positive read at most
    ``ACQUIRER_BREAKER_PRECHECK_FRESH_SECONDS`` old is reused (``AcquirerClient.admits``): the
    attempt's own admission, when it is sent, still refuses it if the breaker opened since."""
    waits = []
    fresh = settings.ACQUIRER_BREAKER_PRECHECK_FRESH_SECONDS
    for name in route:
        admitted, retry_after = client_for(name, client).admits("authorize", fresh_within=fresh)
        if admitted:
            return name, 0.0
        waits.append(retry_after)
    return None, min(waits, default=0.0)


def next_acquirer(
    candidates: Sequence[str], *, client: AcquirerClient | None, time_left: float
) -> tuple[tuple[str, AcquirerClient] | None, list[dict], list[str]]:
    """The first of ``candidates`` (names, in order) to fail over to with ``time_left``
    seconds of the request's deadline, as ``(name, client)``; the ones skipped before it
    (``{"acquirer", "reason"}``: :func:`~payments.acquirer.routing.skip_reason`, or
    ``not_configured``); and the candidates after it. None when the time left is below
    ``ACQUIRER_MIN_ATTEMPT_SECONDS`` or every candidate is skipped. Sends nothing."""
    skipped: list[dict] = []
    if time_left < settings.ACQUIRER_MIN_ATTEMPT_SECONDS:
        return None, skipped, []
    for index, name in enumerate(candidates):
        try:
            candidate = client_for(name, client)
        except UnknownAcquirer:
            skipped.append({"acquirer": name, "reason": "not_configured"})
            continue
        reason = skip_reason(candidate, time_left=time_left, last=index == len(candidates) - 1)
        if reason is None:
            return (name, candidate), skipped, list(candidates[index + 1 :])
        skipped.append({"acquirer": name, "reason": reason})
    return None, skipped, []


def acquirer_switch(
    payment_id: str,
    attempt: AcquirerAttempt,
    *,
    from_acquirer: str,
    to_acquirer: str,
    skipped: Sequence[dict] = (),
    now: datetime,
) -> Payment | None:
    """Move the payment to ``to_acquirer`` in one short transaction, committed before anything
    is sent there: under the payment's row lock, record ``attempt`` (at ``from_acquirer``,
    which certainly did not apply it) as an ``acquirer_attempt`` event and an
    ``acquirer_switched`` event (data: from, to, the reason, the skipped acquirers), and set
    ``acquirer`` and the acquirer idempotency key of the new acquirer on the row.

    Returns the payment as committed, or None (nothing changed but the attempt's event) when
    it is no longer ``processing`` at ``from_acquirer`` (reconciliation resolved it meanwhile).
    """
    with transaction.atomic():
        payment = payment_lock(payment_id)
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.ACQUIRER_ATTEMPT,
            now=now,
            data=attempt.as_event_data(),
        )
        if payment.status != PaymentStatus.PROCESSING or payment.acquirer != from_acquirer:
            return None
        payment.acquirer = to_acquirer
        payment.acquirer_idempotency_key = acquirer_idempotency_key(
            payment.id, to_acquirer, first=False
        )
        payment.updated_at = now
        payment.save(update_fields=["acquirer", "acquirer_idempotency_key", "updated_at"])
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.ACQUIRER_SWITCHED,
            now=now,
            data={
                "from_acquirer": from_acquirer,
                "to_acquirer": to_acquirer,
                "reason": attempt.decline_code or attempt.outcome.value,
                "skipped": list(skipped),
            },
        )
    logger.info(
        "payment %s failover from=%s to=%s reason=%s",
        payment_id,
        from_acquirer,
        to_acquirer,
        attempt.outcome.value,
    )
    return payment

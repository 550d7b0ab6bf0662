"""The create flow of the payments app: ``payment_create``, idempotent, in two phases.

The protocol (Brandur Leach's rocket-rides, adapted):

* Phase 1, one short transaction (:func:`payment_claim`): claim the idempotency key and create the
  payment ``processing``; commit. A duplicate request now gets a fast 409 or a replay. The
  common cases (a new key, a replay, a 409, a 422) are one statement (ADR 0026).
* The acquirer call, outside any transaction, with the payment's acquirer idempotency key,
  routed and failing over only when certain
  (:func:`payments.authorization.failover.payment_authorize_routed`:
  each move to the next acquirer is committed before the request goes there).
* Phase 2, one short transaction (:func:`payment_authorization_record`): record the attempt,
  the transition that :data:`OUTCOME_TRANSITIONS` gives its outcome, and the answer to replay,
  and complete the key; or, when the request was certainly not applied, mark the payment
  ``failed`` and release the key so the merchant can retry with the same key. An unknown
  outcome is the one case that schedules reconciliation. A known outcome of a payment still
  ``processing`` is one statement (``payments.core.payment_states.payment_outcome_record``).

The answer is rendered once, in phase 2 (``payments.core.payment_states.payment_answer_store``), and
stored with the key, so every replay is byte-identical; ``payments.api.responses.create_answer``
turns the result (:class:`~payments.core.answers.Replayed`, :class:`~payments.core.answers.Answered`
or :class:`~payments.core.answers.Unavailable`) into the HTTP response.
"""

from __future__ import annotations

import copy
import logging
import math
import random as random_module
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateway_client import AcquirerClient
from idempotency.services import (
    idempotency_key_release,
)
from merchants.models import Merchant
from observability.request_context import request_line_note
from observability.trace_context import PAYMENT_ID, span_note, tracer
from payments.acquirer.routing import acquirer_route, charged_anywhere
from payments.authorization.deferral import DeferralPolicy, payment_defer
from payments.authorization.failover import payment_authorize_routed, route_start
from payments.authorization.key_claim import key_replayable
from payments.authorization.phase_one import PAYMENTS_ROUTE, payment_claim
from payments.core.answers import Answered, CreateResult, Replayed, Unavailable
from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome
from payments.core.crashpoints import crash_point
from payments.core.payment_states import (
    payment_answer_store,
    payment_event_record,
    payment_lock_with_key,
    payment_outcome_record,
    payment_transition,
)
from payments.models import (
    CaptureMethod,
    Payment,
    PaymentEventType,
    PaymentStatus,
)
from payments.monitoring.metrics import (
    record_idempotency_replay,
)
from payments.reconciliation.tasks import payment_reconcile_task

__all__ = [
    "OUTCOME_TRANSITIONS",
    "PAYMENTS_ROUTE",
    "Answered",
    "CreateResult",
    "NoAcquirerForPayment",
    "Replayed",
    "Unavailable",
    "payment_authorization_record",
    "payment_create",
]

logger = logging.getLogger(__name__)

#: The span attribute of a payment's status after phase 2 (ADR 0044).
STATUS = "payments.payment.status"


#: Phase 2's one table: outcome -> (status it moves to, event type, failure code). The outcome
#: missing here, :attr:`AuthorizationOutcome.UNKNOWN`, leaves the payment ``processing`` and
#: schedules reconciliation.
OUTCOME_TRANSITIONS: dict[AuthorizationOutcome, tuple[str, PaymentEventType, str | None]] = {
    AuthorizationOutcome.APPROVED: (
        PaymentStatus.SUCCEEDED,
        PaymentEventType.AUTHORIZATION_APPROVED,
        None,
    ),
    AuthorizationOutcome.DECLINED: (
        PaymentStatus.DECLINED,
        PaymentEventType.AUTHORIZATION_DECLINED,
        None,
    ),
    AuthorizationOutcome.ACTION_REQUIRED: (
        PaymentStatus.REQUIRES_ACTION,
        PaymentEventType.ACTION_REQUIRED,
        None,
    ),
    AuthorizationOutcome.NOT_SENT: (
        PaymentStatus.FAILED,
        PaymentEventType.AUTHORIZATION_NOT_SENT,
        "acquirer_unavailable",
    ),
    AuthorizationOutcome.CIRCUIT_OPEN: (
        PaymentStatus.FAILED,
        PaymentEventType.AUTHORIZATION_NOT_SENT,
        "circuit_open",
    ),
    AuthorizationOutcome.REJECTED: (
        PaymentStatus.FAILED,
        PaymentEventType.AUTHORIZATION_REJECTED,
        "acquirer_rejected",
    ),
}


def payment_create(
    *,
    merchant: Merchant,
    idempotency_key: str,
    amount: int,
    currency: str,
    payment_method: str,
    reference: str | None = None,
    description: str | None = None,
    capture_method: str = "automatic",
    allow_deferred: bool = False,
    return_url: str | None = None,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> CreateResult:
    """Create a payment idempotently under ``idempotency_key`` and authorize it, routed to the
    acquirers that take it and failing over only when certain
    (:func:`payments.authorization.failover.payment_authorize_routed`).

    ``amount`` in minor units of ``currency`` (ISO 4217), ``payment_method`` a token, the
    optional merchant ``reference`` and ``description``: the validated body of
    ``POST /payments``. ``client``: a caller's client, used for the acquirer it belongs to
    (None: the process's clients). Returns :class:`Replayed`, :class:`Answered` or
    :class:`Unavailable`. The routed acquirers' circuit breakers are checked before anything
    is written (all open: :class:`Unavailable`), unless the key already holds an answer to
    replay; the payment starts at the first acquirer whose breaker admits it. Raises
    :class:`NoAcquirerForPayment` when no configured acquirer takes the currency, capture
    method and payment method's family together, ``IdempotencyKeyReused`` (422) and
    ``IdempotencyKeyInUse`` (409) from the claim, each counted.

    ``allow_deferred``: when every breaker refuses, or the first attempt (after failover) is
    certainly not applied, the payment is ``deferred`` (a stored ``202``;
    ``payments.authorization.deferral``, with ``random`` for its backoff) instead of the ``503``;
    ``payments.authorization.deferred_sweep`` submits it later.

    ``return_url`` (checked by the caller, as a webhook URL is): the merchant's page for the
    shopper after a customer action. With it, an acquirer that asks for the shopper
    (3-D Secure) leaves the payment ``requires_action`` with its ``next_action`` (ADR 0049);
    without it, such a payment is declined ``shopper_action_required``.
    """
    body = {"amount": amount, "currency": currency, "payment_method": payment_method}
    # The default capture method is left out, so the fingerprint of an automatic request is
    # the one it had before manual capture existed.
    manual = capture_method if capture_method != CaptureMethod.AUTOMATIC else None
    # allow_deferred joins the fingerprint only when true, for the same reason.
    optional = {
        "reference": reference,
        "description": description,
        "capture_method": manual,
        "allow_deferred": True if allow_deferred else None,
        "return_url": return_url,
    }
    body |= {name: value for name, value in optional.items() if value is not None}
    now = clock()
    route = acquirer_route(
        currency=currency,
        capture_method=capture_method,
        payment_method=payment_method,
        preferred=merchant.preferred_acquirers,
    )
    start, retry_after = route_start(route, client)
    if start is None and not key_replayable(merchant, idempotency_key, now):
        if not route:
            raise NoAcquirerForPayment(
                currency, capture_method, payment_method=not charged_anywhere(payment_method)
            )
        if not allow_deferred:
            # Every breaker is open: answer at once, before anything is written; the key
            # stays free.
            return Unavailable(retry_after=max(1, math.ceil(retry_after)))
    with tracer.start_as_current_span("payment phase 1"):
        claimed = payment_claim(
            merchant=merchant,
            idempotency_key=idempotency_key,
            body=body,
            now=now,
            acquirer=(start or route[0]) if route else "",
        )
        if not isinstance(claimed, Replayed):
            span_note({PAYMENT_ID: claimed.payment.pk})
    if isinstance(claimed, Replayed):
        record_idempotency_replay()
        return claimed
    crash_point("after_phase1_commit")
    if start is None and allow_deferred and claimed.first_attempt:
        return _defer(claimed.payment.pk, None, "circuit_open", retry_after, clock(), random)
    attempt = payment_authorize_routed(
        claimed.payment, first_attempt=claimed.first_attempt, route=route, client=client
    )
    crash_point("after_acquirer_answer")
    if allow_deferred and claimed.first_attempt and attempt.outcome.not_applied:
        wait = attempt.retry_after_seconds
        return _defer(claimed.payment.pk, attempt, attempt.outcome.value, wait, clock(), random)
    # Phase 1's payment in memory serves phase 2's one-statement path unless it moved to
    # another acquirer (the switch changed its row): then phase 2 reads the row.
    unmoved = attempt.acquirer in (None, claimed.payment.acquirer)
    phase_two = {PAYMENT_ID: claimed.payment.pk}
    with tracer.start_as_current_span("payment phase 2", attributes=phase_two):
        return payment_authorization_record(
            claimed.payment.pk,
            attempt,
            first_attempt=claimed.first_attempt,
            now=clock(),
            payment=claimed.payment if unmoved else None,
        )


def _defer(
    payment_id: str,
    attempt: AcquirerAttempt | None,
    reason: str,
    wait: float | None,
    now: datetime,
    random: Callable[[], float],
) -> Answered:
    """Phase 2 of an ``allow_deferred`` payment no acquirer could take now: ``deferred``."""
    return payment_defer(
        payment_id,
        attempt=attempt,
        reason=reason,
        wait=wait,
        now=now,
        policy=DeferralPolicy.from_settings(),
        random=random,
    )


class NoAcquirerForPayment(Exception):
    """No configured acquirer (``ACQUIRERS``) takes the payment's ISO 4217 currency with its
    capture method and its payment method's family (ADR 0051): a 400 before anything is
    stored (the request cannot succeed as sent). ``payment_method``: True when no acquirer
    charges the payment method's family at all (the field to blame), False when the
    currency or capture method is what no acquirer of that family takes."""

    def __init__(self, currency: str, capture_method: str, *, payment_method: bool) -> None:
        what = "this payment method" if payment_method else f"{currency} with {capture_method}"
        super().__init__(f"no acquirer takes {what}")
        self.currency = currency
        self.capture_method = capture_method
        self.payment_method = payment_method


def payment_authorization_record(
    payment_id: str,
    attempt: AcquirerAttempt,
    *,
    first_attempt: bool,
    now: datetime,
    payment: Payment | None = None,
) -> Answered | Unavailable:
    """Phase 2: record ``attempt`` for the payment in one transaction, under the payment's and
    then its key's row lock (``payments.core.payment_states``'s order).

    The ``acquirer_attempt`` event always; then, if the payment is still ``processing``, the
    transition :data:`OUTCOME_TRANSITIONS` gives the outcome, or for an unknown outcome the
    ``authorization_outcome_unknown`` event and a scheduled reconciliation. A not-applied
    outcome of a resumed payment counts as unknown (an earlier attempt may have been applied).
    Not applied: the key is released and :class:`Unavailable` returned. Otherwise the answer
    is stored for the key (when the payment has one) and returned as :class:`Answered`.

    ``payment``: the payment as phase 1 left it, when the caller has it. Then an approval, a
    decline or a rejection is recorded in one statement while the payment is still
    ``processing`` (``payments.core.payment_states.payment_outcome_record``); any other case, or a
    payment resolved meanwhile, takes the locks and reads the rows as above.
    """
    outcome = attempt.outcome
    if outcome.not_applied and not first_attempt:
        outcome = AuthorizationOutcome.UNKNOWN  # this attempt was not applied; an earlier may be
    with transaction.atomic():
        if payment is not None and outcome in OUTCOME_TRANSITIONS and not outcome.not_applied:
            to_status, event_type, failure_code = OUTCOME_TRANSITIONS[outcome]
            recorded = payment_outcome_record(
                copy.copy(payment),
                attempt_data=attempt.as_event_data(),
                to_status=to_status,
                event_type=event_type,
                now=now,
                changes=_outcome_changes(attempt, failure_code, now),
            )
            if recorded is not None:
                crash_point("before_phase2_commit")
                _authorize_outcome_log(recorded[0], outcome)
                return Answered(payment=recorded[0], response=recorded[1])
        payment, key = payment_lock_with_key(payment_id)
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.ACQUIRER_ATTEMPT,
            now=now,
            data=attempt.as_event_data(),
        )
        if payment.status != PaymentStatus.PROCESSING:
            pass  # Resolved meanwhile (by reconciliation): the answer renders what is now true.
        elif outcome in OUTCOME_TRANSITIONS:
            to_status, event_type, failure_code = OUTCOME_TRANSITIONS[outcome]
            changes = _outcome_changes(attempt, failure_code, now)
            payment_transition(
                payment=payment, to_status=to_status, event_type=event_type, now=now, **changes
            )
            if outcome.not_applied:
                if key is not None:
                    idempotency_key_release(record=key)
                return Unavailable(retry_after=attempt.retry_after_seconds, payment=payment)
        else:
            payment_event_record(
                payment=payment,
                event_type=PaymentEventType.AUTHORIZATION_OUTCOME_UNKNOWN,
                now=now,
                data={},
            )
            _schedule_reconciliation(payment, now)
        response = payment_answer_store(payment, key=key, now=now)
        crash_point("before_phase2_commit")
    _authorize_outcome_log(payment, outcome)
    return Answered(payment=payment, response=response)


def _authorize_outcome_log(payment: Payment, outcome: AuthorizationOutcome) -> None:
    """The authorization's outcome and the payment's status: two fields of the request line
    with its ``payment_id`` when a request is running (ADR 0028), else (a task, a command) a
    line of their own; and two attributes of the running span (phase 2's)."""
    span_note({"payments.authorization.outcome": outcome.value, STATUS: str(payment.status)})
    if not request_line_note(
        payment_id=payment.id, payment_status=str(payment.status), authorize_outcome=outcome.value
    ):
        logger.info(
            "payment %s authorize outcome=%s status=%s", payment.id, outcome.value, payment.status
        )


def _outcome_changes(
    attempt: AcquirerAttempt, failure_code: str | None, now: datetime
) -> dict[str, object]:
    """The payment's fields an outcome sets besides its status (phase 2's transition); a
    customer action's page and its expiry (``CUSTOMER_ACTION_EXPIRY_SECONDS`` from ``now``)."""
    changes: dict[str, object] = {"next_check_at": None}
    for name in ("acquirer_reference", "decline_code", "action_url"):
        if getattr(attempt, name) is not None:
            changes[name] = getattr(attempt, name)
    if attempt.outcome is AuthorizationOutcome.ACTION_REQUIRED:
        changes["action_expires_at"] = now + timedelta(
            seconds=settings.CUSTOMER_ACTION_EXPIRY_SECONDS
        )
    if failure_code is not None:
        changes["failure_code"] = failure_code
    return changes


def _schedule_reconciliation(payment: Payment, now: datetime) -> None:
    """After an unknown outcome (inside phase 2): the sweep's fallback time in the database,
    and the task enqueued when the transaction commits, so the common case resolves in seconds.
    A lost task only delays the payment until the next sweep."""
    payment.next_check_at = now + timedelta(seconds=settings.RECONCILIATION_BACKOFF_BASE_SECONDS)
    payment.save(update_fields=["next_check_at"])
    transaction.on_commit(
        lambda: payment_reconcile_task.apply_async(
            args=[payment.id], countdown=settings.RECONCILIATION_FIRST_CHECK_SECONDS
        ),
        robust=True,
    )

"""Operators' actions on payments (the admin's buttons), each audited as a payment event.

Every action names the operator (a username) and carries a required note, and both end up in
the payment's append-only event log:

* :func:`payment_reconcile_request` ("Reconcile now"): an ``operator_reconcile_requested``
  event, and the reconciliation task (``payments.reconciliation.tasks.payment_reconcile_task``)
  enqueued
  when the transaction commits. A ``processing`` payment is also made due at once, so the beat
  sweep picks it up if the task message is lost. Nothing here calls the acquirer.
* :func:`payment_resolve` ("Resolve as succeeded / declined / failed after manual check"): only
  from ``needs_review``, through the state machine
  (``payments.core.payment_states.payment_transition``),
  with a ``resolved_by_operator`` event; the answer stored for the merchant's idempotency key is
  refreshed, so a retry of the original request replays the final outcome.

* "Refund" (``payments.refund_payment``) is not here: it is the API's own service
  (``payments.operations.flows.refund_create``, which this module must not stand on), called
  by the admin with the operator and note as its ``audit`` data, under the merchant idempotency
  key :func:`admin_refund_key` makes for each rendered form (a double submit replays instead
  of refunding twice). The form carries it signed with the time it was rendered
  (:func:`admin_refund_form_token`) and refuses it after ``ADMIN_REFUND_FORM_SECONDS``
  (:func:`admin_refund_form_key`), which the check ``payments.E010`` keeps below the key's
  retention: a form re-sent after its key was purged is refused, never refunded again.

No action edits an amount, and no status changes except through ``ALLOWED_TRANSITIONS``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import datetime

from django.core.signing import BadSignature, Signer
from django.db import transaction
from django.utils import timezone

from card_data import contains_card_number
from payments.core.payment_states import (
    UnexpectedStatus,
    payment_answer_store,
    payment_event_record,
    payment_lock,
    payment_lock_with_key,
    payment_transition,
)
from payments.models import Payment, PaymentEventType, PaymentStatus
from payments.reconciliation.tasks import payment_reconcile_task

__all__ = [
    "ADMIN_REFUND_KEY_PATTERN",
    "CODE_PATTERN",
    "NOTE_MAX_LENGTH",
    "RECONCILABLE_STATUSES",
    "RESOLUTIONS",
    "OperationRefused",
    "admin_refund_form_key",
    "admin_refund_form_token",
    "admin_refund_key",
    "clean_note",
    "payment_reconcile_request",
    "payment_resolve",
]

#: Statuses "Reconcile now" accepts: the outcome is not known yet.
RECONCILABLE_STATUSES = frozenset({PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW})
#: What a payment in ``needs_review`` may be resolved to after a manual check.
RESOLUTIONS = frozenset({PaymentStatus.SUCCEEDED, PaymentStatus.DECLINED, PaymentStatus.FAILED})
#: Longest accepted note, in characters.
NOTE_MAX_LENGTH = 1000
#: Decline and failure codes: lower-case words joined by underscores, like the acquirer's.
CODE_PATTERN = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")
#: The failure code of a payment resolved as failed when the operator gives none.
DEFAULT_FAILURE_CODE = "not_authorized_at_acquirer"
#: The merchant idempotency keys of the admin's refunds: ``admin-refund-`` + 32 hex characters.
ADMIN_REFUND_KEY_PATTERN = re.compile(r"^admin-refund-[0-9a-f]{32}$")


#: The refusal of a note or code holding a card number: it never repeats the value.
CARD_DATA_REFUSED = "Card numbers are not accepted in notes or codes; nothing was recorded."


class OperationRefused(Exception):
    """The action does not apply to this payment (its status changed, or a bad argument)."""


def clean_note(*, operator: str, note: str) -> str:
    """``note`` stripped; raises :class:`OperationRefused` without an operator or a note, for a
    note longer than :data:`NOTE_MAX_LENGTH` characters, or for one holding a card number
    (``card_data``; the message does not repeat it)."""
    note = (note or "").strip()
    if not operator:
        raise OperationRefused("The operator is required.")
    if not note:
        raise OperationRefused("A note is required.")
    if contains_card_number(note):
        raise OperationRefused(CARD_DATA_REFUSED)
    if len(note) > NOTE_MAX_LENGTH:
        raise OperationRefused(f"The note is longer than {NOTE_MAX_LENGTH} characters.")
    return note


def payment_reconcile_request(
    *,
    payment_id: str,
    operator: str,
    note: str,
    clock: Callable[[], datetime] = timezone.now,
) -> Payment:
    """Record the operator's request and enqueue ``payment_reconcile_task`` when it commits.

    Only for ``processing`` and ``needs_review`` payments; raises :class:`OperationRefused`
    otherwise, or without an operator or a note. The task claims the payment before touching it
    (a payment held by a running reconciliation is left to it), so asking twice is harmless.
    """
    note = clean_note(operator=operator, note=note)
    now = clock()
    with transaction.atomic():
        try:
            payment = payment_lock(payment_id, expect=RECONCILABLE_STATUSES)
        except UnexpectedStatus as exc:
            raise OperationRefused(
                f"A {exc.status} payment is resolved; there is nothing to reconcile."
            ) from exc
        if payment.status == PaymentStatus.PROCESSING and (
            payment.next_check_at is None or payment.next_check_at > now
        ):
            payment.next_check_at = now  # due now: the sweep takes it if the message is lost
            payment.save(update_fields=["next_check_at"])
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.OPERATOR_RECONCILE_REQUESTED,
            now=now,
            data={"operator": operator, "note": note},
        )
        transaction.on_commit(
            lambda: payment_reconcile_task.delay(payment.id, operator_requested=True),
            robust=True,
        )
    return payment


def payment_resolve(
    *,
    payment_id: str,
    to_status: str,
    operator: str,
    note: str,
    acquirer_reference: str | None = None,
    code: str | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> Payment:
    """Resolve a ``needs_review`` payment after a manual check at the acquirer.

    ``to_status`` is ``succeeded``, ``declined`` or ``failed``. ``acquirer_reference`` is the
    acquirer's id found during the check (optional). ``code`` is the decline code (required
    for ``declined``) or the failure code (``failed``; default
    :data:`DEFAULT_FAILURE_CODE`). The transition goes through ``payment_transition`` under the
    payment's row lock, and the answer stored for the payment's idempotency key is refreshed in
    the same transaction. Raises :class:`OperationRefused` when the payment is not in
    ``needs_review`` (for example resolved meanwhile) or an argument is invalid.
    """
    note = clean_note(operator=operator, note=note)
    if to_status not in RESOLUTIONS:
        raise OperationRefused(f"{to_status!r} is not a resolution.")
    code = (code or "").strip() or None
    if any(contains_card_number(text or "") for text in (code, acquirer_reference)):
        raise OperationRefused(CARD_DATA_REFUSED)
    if to_status == PaymentStatus.DECLINED and code is None:
        raise OperationRefused("A decline code is required to resolve as declined.")
    if to_status == PaymentStatus.FAILED and code is None:
        code = DEFAULT_FAILURE_CODE
    if code is not None and (len(code) > 64 or not CODE_PATTERN.match(code)):
        raise OperationRefused("A code is lower-case letters, digits and underscores.")
    if to_status == PaymentStatus.SUCCEEDED and code is not None:
        raise OperationRefused("A succeeded payment has no decline or failure code.")
    acquirer_reference = (acquirer_reference or "").strip() or None
    if acquirer_reference is not None and len(acquirer_reference) > 64:
        raise OperationRefused("The acquirer reference is longer than 64 characters.")

    now = clock()
    with transaction.atomic():
        try:
            payment, key = payment_lock_with_key(payment_id, expect=[PaymentStatus.NEEDS_REVIEW])
        except UnexpectedStatus as exc:
            raise OperationRefused(
                f"Only a payment in needs_review can be resolved; this one is {exc.status}."
            ) from exc
        changes: dict = {
            "next_check_at": None,
            "reconciliation_lease_until": None,
            "decline_code": code if to_status == PaymentStatus.DECLINED else None,
            "failure_code": code if to_status == PaymentStatus.FAILED else None,
        }
        if acquirer_reference is not None:
            changes["acquirer_reference"] = acquirer_reference
        data = {"operator": operator, "note": note, "how": "manual_check"}
        if acquirer_reference is not None:
            data["acquirer_reference"] = acquirer_reference
        if code is not None:
            data["code"] = code
        payment_transition(
            payment=payment,
            to_status=to_status,
            event_type=PaymentEventType.RESOLVED_BY_OPERATOR,
            now=now,
            data=data,
            **changes,
        )
        payment_answer_store(payment, key=key, now=now)
    return payment


def admin_refund_key() -> str:
    """A new idempotency key for one admin refund form: ``admin-refund-`` + 32 lower-case hex
    characters (128 random bits), rendered with the form and sent back with it."""
    return "admin-refund-" + secrets.token_hex(16)


#: The salt of the refund form's signed key (django.core.signing, keyed by SECRET_KEY).
REFUND_FORM_SALT = "payments.admin.refund_form"
#: How far a form's time may lie ahead of ``now`` (clocks of two web hosts), in seconds.
REFUND_FORM_CLOCK_SKEW_SECONDS = 60


def admin_refund_form_token(*, now: datetime) -> str:
    """The refund form's hidden value: a new :func:`admin_refund_key` and ``now`` (whole Unix
    seconds), signed: ``admin-refund-<32 hex>:<seconds>:<signature>``."""
    return Signer(salt=REFUND_FORM_SALT).sign(f"{admin_refund_key()}:{int(now.timestamp())}")


def admin_refund_form_key(token: str, *, now: datetime, max_age: float) -> str:
    """The idempotency key of a refund form's ``token`` (:func:`admin_refund_form_token`),
    if its signature holds and it was rendered at most ``max_age`` seconds before ``now``.

    Raises :class:`OperationRefused` for a token altered or malformed, and for an expired one:
    its key may be purged (24 h after its first use), and a key that is gone would refund
    again. ``max_age`` stays below the key's retention (the check ``payments.E010``)."""
    try:
        value = Signer(salt=REFUND_FORM_SALT).unsign(token)
    except BadSignature:
        raise OperationRefused("The form's refund key is malformed; reload the page.") from None
    key, _, issued = value.rpartition(":")
    if not ADMIN_REFUND_KEY_PATTERN.match(key) or not issued.isdigit():
        raise OperationRefused("The form's refund key is malformed; reload the page.")
    age = now.timestamp() - int(issued)
    if not -REFUND_FORM_CLOCK_SKEW_SECONDS <= age <= max_age:
        raise OperationRefused(
            f"This refund form is older than {max_age / 60:g} minutes and nothing was "
            "refunded: open the refund page again."
        )
    return key

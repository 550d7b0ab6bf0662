"""Payments and their append-only event log.

State machine (see README): a payment is created ``processing`` in the same transaction that
claims its idempotency key, then moves once to ``succeeded``, ``declined`` or ``failed``, or
stays ``processing`` until reconciliation resolves it (``needs_review`` when it cannot).
``payments.core.payment_states.ALLOWED_TRANSITIONS`` is the only place that changes a status, and
``payments.core.payment_states`` takes the only row locks on payments.

Row locks on payments are always ``FOR NO KEY UPDATE`` (``select_for_update(no_key=True)``):
it conflicts with other updates but not with the ``KEY SHARE`` lock that inserting a
``PaymentEvent`` takes through its foreign key, so a request holding an idempotency key and
appending an event never deadlocks with reconciliation holding the payment and asking for the
key.
"""

from __future__ import annotations

import secrets

from django.db import models

from payments.core.money import MAX_AMOUNT, MIN_AMOUNT

# The notification log and disputes live in a module of their own; Django finds an app's
# models here, so they are imported (and re-exported) by this module.
from payments.core.notification_models import (  # noqa: F401
    AcquirerNotification,
    Dispute,
    DisputeStatus,
    NotificationStatus,
)


def new_payment_id() -> str:
    """Return a new payment id: ``pay_`` + 24 lower-case hex characters (96 random bits)."""
    return "pay_" + secrets.token_hex(12)


def new_return_token() -> str:
    """Return a new return token: ``rtok_`` + 43 URL-safe characters (256 random bits), the
    unguessable part of the shopper's return address ``/payments/return/<token>``. The prefix
    is one the log and span redaction hides (``observability.log_filters.KEY_PREFIXES``)."""
    return "rtok_" + secrets.token_urlsafe(32)


def new_operation_id(kind: str) -> str:
    """Return a new :class:`PaymentOperation` id: ``re_`` + 24 lower-case hex characters for a
    refund (the public refund id), ``op_`` + 24 hex for a capture or a void."""
    return ("re_" if kind == OperationKind.REFUND else "op_") + secrets.token_hex(12)


class PaymentStatus(models.TextChoices):
    PROCESSING = "processing", "Processing"
    #: Not sent to any acquirer yet: no acquirer could take it when it was created (an
    #: ``allow_deferred`` payment); the deferred sweep submits it at ``not_before`` or later.
    DEFERRED = "deferred", "Deferred"
    SUCCEEDED = "succeeded", "Succeeded"
    DECLINED = "declined", "Declined"
    FAILED = "failed", "Failed"
    NEEDS_REVIEW = "needs_review", "Needs review"
    #: A manual payment, authorized and not yet captured (the money is held).
    REQUIRES_CAPTURE = "requires_capture", "Requires capture"
    #: A capture was sent; its outcome is not known yet (reconciliation resolves it).
    CAPTURE_PENDING = "capture_pending", "Capture pending"
    #: A void was sent; its outcome is not known yet (reconciliation resolves it).
    VOID_PENDING = "void_pending", "Void pending"
    #: The authorization was released (voided); nothing was captured. Also a customer action
    #: that expired (the shopper never finished it): voided at the acquirer.
    CANCELED = "canceled", "Canceled"
    #: The acquirer holds the payment for the shopper (3-D Secure): the merchant sends the
    #: shopper to ``next_action``'s URL; the shopper's return, a notification, or the expiry
    #: sweep ends it (payments/reconciliation/actions.py, ADR 0049).
    REQUIRES_ACTION = "requires_action", "Requires action"


class CaptureMethod(models.TextChoices):
    """``automatic``: the acquirer authorizes and captures in one call. ``manual``: authorize
    only; ``POST /payments/{id}/capture`` or ``/void`` follows."""

    AUTOMATIC = "automatic", "Automatic"
    MANUAL = "manual", "Manual"


class OperationKind(models.TextChoices):
    """The acquirer operations after the authorization (:class:`PaymentOperation`)."""

    CAPTURE = "capture", "Capture"
    VOID = "void", "Void"
    REFUND = "refund", "Refund"


class OperationStatus(models.TextChoices):
    """``pending``: created, sent or about to be, outcome not known. ``succeeded``: applied at
    the acquirer. ``failed``: not applied (refused, declined, or certainly not sent).
    ``needs_review``: unresolved at reconciliation's maximum age, handed to a human."""

    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    NEEDS_REVIEW = "needs_review", "Needs review"


class RefundReason(models.TextChoices):
    """Why a refund was asked for (Stripe's values)."""

    REQUESTED_BY_CUSTOMER = "requested_by_customer", "Requested by customer"
    DUPLICATE = "duplicate", "Duplicate"
    FRAUDULENT = "fraudulent", "Fraudulent"


class PaymentEventType(models.TextChoices):
    """The type of a :class:`PaymentEvent` (Saleor's ``TransactionEventType`` habit): one value
    per thing that happens to a payment. Stored as the string value; the column has no
    ``choices`` (the values are the contract, old rows keep theirs)."""

    #: Phase 1 created the payment ``processing`` with its idempotency key.
    PAYMENT_CREATED = "payment_created", "Payment created"
    #: The merchant retried a key whose stored answer was a 202: the payment is re-sent.
    MERCHANT_RETRY = "merchant_retry", "Merchant retried"
    #: A request took over a key left in progress by a crashed request: the payment is re-sent.
    KEY_TAKEN_OVER = "key_taken_over", "Key taken over"
    #: One call to the acquirer's authorize (data: an ``AcquirerAttempt``), whatever it answered.
    ACQUIRER_ATTEMPT = "acquirer_attempt", "Acquirer attempt"
    #: processing -> succeeded: the acquirer authorized the payment.
    AUTHORIZATION_APPROVED = "authorization_approved", "Authorization approved"
    #: processing -> declined: the acquirer declined it (a result, not an error).
    AUTHORIZATION_DECLINED = "authorization_declined", "Authorization declined"
    #: processing -> failed: certainly not applied (unreachable, or the breaker open).
    AUTHORIZATION_NOT_SENT = "authorization_not_sent", "Authorization not sent"
    #: processing -> failed: the acquirer refused our request (a permanent error).
    AUTHORIZATION_REJECTED = "authorization_rejected", "Authorization rejected"
    #: processing -> deferred: certainly not applied and the merchant allowed deferral; the
    #: deferred sweep submits it at not_before (data: reason, not_before, attempt).
    PAYMENT_DEFERRED = "payment_deferred", "Payment deferred"
    #: deferred -> processing: the deferred sweep claimed it and is sending it now.
    DEFERRED_SUBMITTED = "deferred_submitted", "Deferred payment submitted"
    #: deferred -> failed: still not sent after DEFERRED_MAX_AGE_SECONDS (acquirer_unavailable).
    DEFERRED_EXPIRED = "deferred_expired", "Deferred payment expired"
    #: The acquirer may have applied it: stays processing, reconciliation is scheduled.
    AUTHORIZATION_OUTCOME_UNKNOWN = "authorization_outcome_unknown", "Authorization outcome unknown"
    #: processing/needs_review -> final: reconciliation found (or re-sent and got) the outcome.
    RECONCILED = "reconciled", "Reconciled"
    #: A reconciliation check that did not resolve the payment (data: result, next check).
    RECONCILIATION_ATTEMPT = "reconciliation_attempt", "Reconciliation attempt"
    #: processing -> needs_review: too old or too many attempts, handed to a human.
    NEEDS_REVIEW = "needs_review", "Needs review"
    #: An operator asked to reconcile now (data: operator, note).
    OPERATOR_RECONCILE_REQUESTED = (
        "operator_reconcile_requested",
        "Operator requested reconciliation",
    )
    #: needs_review -> final after an operator's manual check (data: operator, note, code).
    RESOLVED_BY_OPERATOR = "resolved_by_operator", "Resolved by operator"
    # Operations after the authorization (data: ``operation`` id, ``kind``, ``amount``, ...).
    #: processing -> requires_capture: the acquirer authorized a manual payment (held).
    AUTHORIZATION_HELD = "authorization_held", "Authorization held for capture"
    #: requires_capture -> capture_pending: phase 1 created the capture operation.
    CAPTURE_REQUESTED = "capture_requested", "Capture requested"
    #: capture_pending -> succeeded: the acquirer captured (data: amount captured).
    CAPTURE_SUCCEEDED = "capture_succeeded", "Capture succeeded"
    #: capture_pending -> requires_capture: not captured (refused, or certainly not sent).
    CAPTURE_FAILED = "capture_failed", "Capture failed"
    #: requires_capture -> void_pending: phase 1 created the void operation.
    VOID_REQUESTED = "void_requested", "Void requested"
    #: void_pending -> canceled: the acquirer released the authorization.
    VOID_SUCCEEDED = "void_succeeded", "Void succeeded"
    #: void_pending -> requires_capture: not voided (refused, or certainly not sent).
    VOID_FAILED = "void_failed", "Void failed"
    #: Phase 1 created a refund (the payment's status does not change).
    REFUND_REQUESTED = "refund_requested", "Refund requested"
    #: The acquirer refunded (amount_refunded grows).
    REFUND_SUCCEEDED = "refund_succeeded", "Refund succeeded"
    #: The refund was not applied (declined, refused, or certainly not sent).
    REFUND_FAILED = "refund_failed", "Refund failed"
    #: One call to the acquirer for an operation (data: an ``AcquirerAttempt`` + operation id).
    OPERATION_ATTEMPT = "operation_attempt", "Operation attempt"
    #: The acquirer may have applied the operation: it stays pending, reconciliation scheduled.
    OPERATION_OUTCOME_UNKNOWN = "operation_outcome_unknown", "Operation outcome unknown"
    #: A reconciliation check of an operation that did not resolve it.
    OPERATION_RECONCILIATION_ATTEMPT = (
        "operation_reconciliation_attempt",
        "Operation reconciliation attempt",
    )
    #: An operation unresolved at reconciliation's maximum age: handed to a human.
    OPERATION_NEEDS_REVIEW = "operation_needs_review", "Operation needs review"
    #: A requires_capture payment older than AUTHORIZATION_HOLD_SECONDS: its void is started.
    AUTHORIZATION_HOLD_EXPIRED = "authorization_hold_expired", "Authorization hold expired"
    #: The payment moved to the next acquirer after the previous one certainly did not apply
    #: it (data: from_acquirer, to_acquirer, reason, skipped), committed before the next send.
    ACQUIRER_SWITCHED = "acquirer_switched", "Switched to the next acquirer"
    #: An operator issued a refund from the admin (data: operator, note, operation, amount,
    #: idempotency_key). Recorded in the transaction that creates the refund, so once per refund.
    OPERATOR_REFUND_REQUESTED = "operator_refund_requested", "Operator requested a refund"
    #: A verified provider notification about this payment was applied (data: acquirer,
    #: event_id, event_type, result); once per notification (payments/notifications/).
    ACQUIRER_NOTIFICATION = "acquirer_notification", "Acquirer notification applied"
    #: processing -> requires_action: the acquirer asks for the shopper (3-D Secure); the
    #: payment shows ``next_action`` until it ends (data: how, expires_at).
    ACTION_REQUIRED = "action_required", "Customer action required"
    #: requires_action -> succeeded / requires_capture / declined / failed: the acquirer's
    #: outcome after the shopper's action, re-fetched (data: how: ``shopper_return``,
    #: ``notification``, ``expiry_lookup``).
    ACTION_COMPLETED = "action_completed", "Customer action completed"
    #: requires_action -> canceled: the shopper never finished by ``action_expires_at``; the
    #: authorization was voided at the acquirer (data: reason ``action_expired``).
    ACTION_EXPIRED = "action_expired", "Customer action expired"
    #: A dispute was opened, changed or closed (data: dispute, status, amount, reason).
    DISPUTE_OPENED = "dispute_opened", "Dispute opened"
    DISPUTE_UPDATED = "dispute_updated", "Dispute updated"
    DISPUTE_CLOSED = "dispute_closed", "Dispute closed"


class Payment(models.Model):
    """One authorization request of a merchant, in minor units of an ISO 4217 currency."""

    id = models.CharField(primary_key=True, max_length=32, default=new_payment_id, editable=False)
    #: No index of its own: every index that starts with ``merchant_id`` serves it (migration
    #: 0012).
    merchant = models.ForeignKey(
        "merchants.Merchant", on_delete=models.PROTECT, related_name="payments", db_index=False
    )
    idempotency_key = models.OneToOneField(
        "idempotency.IdempotencyKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="payment",
        help_text="The key that created this payment; null once the key expired or was released.",
    )
    amount = models.BigIntegerField(help_text="Minor units of the currency.")
    currency = models.CharField(max_length=3, help_text="ISO 4217 alphabetic code.")
    payment_method = models.CharField(max_length=68)
    reference = models.CharField(max_length=128, null=True, blank=True)
    description = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=PaymentStatus, default=PaymentStatus.PROCESSING
    )
    capture_method = models.CharField(
        max_length=16, choices=CaptureMethod, default=CaptureMethod.AUTOMATIC
    )
    amount_captured = models.BigIntegerField(
        default=0, help_text="Minor units captured at the acquirer (0 before a capture)."
    )
    amount_refunded = models.BigIntegerField(
        default=0, help_text="Minor units of the succeeded refunds."
    )
    amount_disputed = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="Minor units held or withdrawn by disputes: open ones and lost ones "
        "(payments.core.dispute_states).",
    )
    decline_code = models.CharField(max_length=64, null=True, blank=True)
    failure_code = models.CharField(max_length=64, null=True, blank=True)
    acquirer_reference = models.CharField(max_length=64, null=True, blank=True)
    acquirer_idempotency_key = models.CharField(
        max_length=64,
        unique=True,
        help_text="Sent to the acquirer on every attempt and every re-send of this payment.",
    )
    #: The acquirer that holds the payment, or may: written (with its acquirer idempotency
    #: key) before anything is sent there, and changed only by a failover after the previous
    #: acquirer certainly did not apply it (payments/authorization/failover.py, ADR 0023).
    #: Captures, voids,
    #: refunds, look-ups, re-sends and reconciliation all go to it.
    acquirer = models.CharField(
        max_length=32,
        help_text="The configured acquirer (ACQUIRERS name) that holds or may hold the payment.",
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # Reconciliation of unresolved payments (payments/reconciliation/payments.py). The schedule
    # lives
    # here, in PostgreSQL, not in broker countdowns.
    next_check_at = models.DateTimeField(
        null=True, blank=True, help_text="When reconciliation looks at this payment next."
    )
    reconciliation_attempts = models.PositiveIntegerField(default=0)
    reconciliation_lease_until = models.DateTimeField(
        null=True, blank=True, help_text="A reconciliation worker owns the payment until then."
    )
    # Deferred submission (payments/authorization/deferred_sweep.py): the merchant's consent, and
    # the schedule of a
    # deferred payment, in PostgreSQL like reconciliation's.
    allow_deferred = models.BooleanField(
        default=False,
        help_text="The merchant allowed deferral: when no acquirer can take it now, it waits "
        "(deferred) instead of failing, and a retry with its key never sends it.",
    )
    not_before = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A deferred payment is submitted at this time or later (null otherwise).",
    )
    deferred_attempts = models.PositiveIntegerField(
        default=0, help_text="Submissions of a deferred payment that were certainly not applied."
    )
    # Customer actions (3-D Secure by redirect, ADR 0049).
    return_url = models.CharField(
        max_length=2048,
        null=True,
        blank=True,
        help_text="The merchant's page the shopper is sent back to after a customer action.",
    )
    #: The unguessable part of our return address (``/payments/return/<token>``), sent to the
    #: acquirer with the authorization; only when ``return_url`` is given. Unique: the return
    #: endpoint finds the payment by it (the partial unique index ``payment_return_token``).
    return_token = models.CharField(max_length=64, null=True, blank=True)
    action_url = models.CharField(
        max_length=2048,
        null=True,
        blank=True,
        help_text="Where the shopper authenticates (the acquirer's page), while requires_action.",
    )
    action_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A customer action not finished by then is voided "
        "(CUSTOMER_ACTION_EXPIRY_SECONDS).",
    )
    #: The W3C ``traceparent`` of the span that created the payment (empty when tracing was
    #: off): reconciliation and the deferred sweep, whoever runs them, add their spans to the
    #: payment's trace (observability/trace_context.py; ADR 0044).
    trace_context = models.CharField(
        max_length=55,
        blank=True,
        default="",
        help_text="W3C traceparent of the request that created the payment (empty: not traced).",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["not_before"],
                name="payment_deferred_due",
                condition=models.Q(status="deferred"),
            ),
            models.Index(
                fields=["merchant", "-created_at", "-id"], name="payment_merchant_created"
            ),
            models.Index(
                fields=["merchant", "status", "-created_at"], name="payment_merchant_status"
            ),
            models.Index(
                fields=["action_expires_at"],
                name="payment_action_expiry_due",
                condition=models.Q(status="requires_action"),
            ),
            models.Index(
                fields=["next_check_at"],
                name="payment_reconciliation_due",
                condition=models.Q(status="processing"),
            ),
            # The operations console (payments/admin/payment.py): its ordering, filters and exact
            # searches at millions of rows (migration 0003).
            models.Index(fields=["-created_at", "-id"], name="payment_created"),
            models.Index(fields=["status", "-created_at", "-id"], name="payment_status_created"),
            models.Index(
                fields=["currency", "-created_at", "-id"], name="payment_currency_created"
            ),
            # The merchant's reference, searched alone (the console) or with the merchant (the
            # API's list filter), and the acquirer's reference (the console's search, the
            # ledger audit): only rows that have one (migration 0012; an equality implies it).
            models.Index(
                fields=["reference", "merchant"],
                name="payment_reference_merchant",
                condition=models.Q(reference__isnull=False),
            ),
            models.Index(
                fields=["acquirer_reference"],
                name="payment_acquirer_ref_lookup",
                condition=models.Q(acquirer_reference__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(amount__gte=MIN_AMOUNT, amount__lte=MAX_AMOUNT),
                name="payment_amount_in_range",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=PaymentStatus.values), name="payment_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(
                    amount_captured__gte=0,
                    amount_captured__lte=models.F("amount"),
                    amount_refunded__gte=0,
                    amount_refunded__lte=models.F("amount_captured"),
                ),
                name="payment_amounts_consistent",
            ),
            models.CheckConstraint(
                condition=models.Q(capture_method__in=CaptureMethod.values),
                name="payment_capture_method_valid",
            ),
            # Only payments with a customer action's return address hold a token (ADR 0049).
            models.UniqueConstraint(
                fields=["return_token"],
                name="payment_return_token",
                condition=models.Q(return_token__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.id


class PaymentOperation(models.Model):
    """One acquirer operation after the authorization: a capture, a void or a refund.

    ``amount`` in minor units of the payment's currency (a void records the authorized
    amount). ``acquirer_idempotency_key`` (``capture-<id>``, ``void-<id>``, ``refund-<id>``) is
    fixed when the row is created and sent on every attempt, re-send and reconciliation. A
    refund's id is its public id (``re_`` + 24 hex); captures and voids are ``op_`` + 24 hex.
    Status and amounts change only through ``payments.core.payment_states``.
    """

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="operations")
    kind = models.CharField(max_length=16, choices=OperationKind)
    amount = models.BigIntegerField(help_text="Minor units of the payment's currency.")
    reason = models.CharField(max_length=32, null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=OperationStatus, default=OperationStatus.PENDING
    )
    failure_code = models.CharField(max_length=64, null=True, blank=True)
    acquirer_reference = models.CharField(
        max_length=64, null=True, blank=True, help_text="The acquirer's id (a refund's re_ id)."
    )
    acquirer_idempotency_key = models.CharField(max_length=64, unique=True)
    idempotency_key = models.OneToOneField(
        "idempotency.IdempotencyKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="payment_operation",
        help_text="The key that created it; null for the beat's voids, or once expired.",
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    next_check_at = models.DateTimeField(null=True, blank=True)
    reconciliation_attempts = models.PositiveIntegerField(default=0)
    reconciliation_lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["payment", "kind", "-created_at", "-id"], name="operation_payment_kind"
            ),
            models.Index(
                fields=["next_check_at"],
                name="operation_reconciliation_due",
                condition=models.Q(status="pending"),
            ),
            models.Index(fields=["acquirer_reference"], name="operation_acquirer_reference"),
            # The operations console's refunds list (payments/admin/payment.py, migration 0007): its
            # ordering, its status filter, and the needs_review banner and filter.
            models.Index(fields=["kind", "-created_at", "-id"], name="operation_kind_created"),
            models.Index(
                fields=["kind", "status", "-created_at", "-id"], name="operation_kind_status"
            ),
            models.Index(
                fields=["payment"],
                name="operation_needs_review",
                condition=models.Q(status="needs_review"),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(amount__gte=MIN_AMOUNT, amount__lte=MAX_AMOUNT),
                name="operation_amount_in_range",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=OperationKind.values), name="operation_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=OperationStatus.values),
                name="operation_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.id


class RefundManager(models.Manager):
    """The ``refund`` operations only."""

    def get_queryset(self):
        return super().get_queryset().filter(kind=OperationKind.REFUND)


class Refund(PaymentOperation):
    """A refund: the ``refund`` rows of :class:`PaymentOperation` (a proxy, no table of its
    own), for the operations console's refunds list. Created only by
    ``payments.operations.flows.refund_create``."""

    objects = RefundManager()

    class Meta:
        proxy = True
        ordering = ["-created_at", "-id"]
        verbose_name = "refund"


class PaymentEvent(models.Model):
    """An append-only record of something that happened to a payment.

    ``data`` never holds secrets or card data: acquirer outcomes are stored as classified
    values (status code, error class, elapsed seconds), never raw headers. ``request_id``: the
    request (or task) that wrote it, so an event, its acquirer attempt and the log lines of
    the same request can be joined (observability/request_context.py).
    """

    #: No index of its own: ``payment_event_timeline`` starts with ``payment_id`` (migration 0012).
    payment = models.ForeignKey(
        Payment, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    type = models.CharField(max_length=64)  # a PaymentEventType value
    from_status = models.CharField(max_length=16, null=True, blank=True)
    to_status = models.CharField(max_length=16, null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    request_id = models.CharField(
        max_length=128,
        null=True,
        blank=True,
        help_text="The id of the API request, admin request or task that wrote the event "
        "(its Request-Id); in every log line of it.",
    )

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["payment", "created_at"], name="payment_event_timeline"),
            # The admin's search by request id (payments/admin/payment.py).
            models.Index(
                fields=["request_id"],
                name="payment_event_request_id",
                condition=models.Q(request_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.payment_id} {self.type}"

"""Reads of the payments app. Every read is scoped to one merchant."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from merchants.models import Merchant
from payments.models import OperationKind, Payment, PaymentOperation


class PaymentNotFound(Exception):
    """No payment with this id belongs to the merchant (another merchant's id included)."""


def payment_get(*, merchant: Merchant, payment_id: str) -> Payment:
    """Return the merchant's payment ``payment_id``. Raises :class:`PaymentNotFound`."""
    payment = Payment.objects.filter(merchant=merchant, pk=payment_id).first()
    if payment is None:
        raise PaymentNotFound(payment_id)
    return payment


@dataclass(frozen=True)
class PaymentPage:
    """One page of a listing, newest first; ``has_more`` says whether older ones exist."""

    payments: list[Payment]
    has_more: bool


def payment_list(
    *,
    merchant: Merchant,
    limit: int = 20,
    status: str | None = None,
    reference: str | None = None,
    starting_after: str | None = None,
) -> PaymentPage:
    """Return up to ``limit`` (1-100) payments, newest first (``created_at``, then ``id``).

    ``starting_after`` is the id of the last payment of the previous page (a keyset cursor, so
    pages stay stable while new payments arrive). Raises :class:`PaymentNotFound` when that id
    is not one of the merchant's payments.
    """
    queryset = Payment.objects.filter(merchant=merchant)
    if status:
        queryset = queryset.filter(status=status)
    if reference:
        queryset = queryset.filter(reference=reference)
    if starting_after:
        cursor = payment_get(merchant=merchant, payment_id=starting_after)
        queryset = queryset.filter(
            Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id)
        )
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return PaymentPage(payments=rows[:limit], has_more=len(rows) > limit)


class RefundNotFound(Exception):
    """No refund with this id belongs to the merchant (another merchant's id included)."""


def refund_get(*, merchant: Merchant, refund_id: str) -> PaymentOperation:
    """Return the merchant's refund ``refund_id`` (with its payment). Raises
    :class:`RefundNotFound`."""
    refund = (
        PaymentOperation.objects.select_related("payment")
        .filter(kind=OperationKind.REFUND, payment__merchant=merchant, pk=refund_id)
        .first()
    )
    if refund is None:
        raise RefundNotFound(refund_id)
    return refund


@dataclass(frozen=True)
class RefundPage:
    """One page of a payment's refunds, newest first; ``has_more``: older ones exist."""

    refunds: list[PaymentOperation]
    has_more: bool


def refund_list(
    *, payment: Payment, limit: int = 20, starting_after: str | None = None
) -> RefundPage:
    """Return up to ``limit`` (1-100) refunds of ``payment``, newest first (``created_at``,
    then ``id``), with the keyset cursor of :func:`payment_list`: ``starting_after`` is the id
    of the last refund of the previous page. Raises :class:`RefundNotFound` when that id is not
    one of this payment's refunds."""
    queryset = PaymentOperation.objects.select_related("payment").filter(
        payment=payment, kind=OperationKind.REFUND
    )
    if starting_after:
        cursor = queryset.filter(pk=starting_after).first()
        if cursor is None:
            raise RefundNotFound(starting_after)
        queryset = queryset.filter(
            Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id)
        )
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return RefundPage(refunds=rows[:limit], has_more=len(rows) > limit)

"""Reads of the payments app. Every read is scoped to one merchant."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from merchants.models import Merchant
from payments.models import Payment


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

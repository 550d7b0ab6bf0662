"""
Disputes as the providers report them, mapped to our four statuses.

A dispute (a chargeback, or an inquiry before one) exists only as the provider's notification.
Ours has one of four statuses: `needs_response` and `under_review` (open: the amount is held
from the merchant or may be), `won` and `lost` (closed: final; `lost` keeps the amount
withdrawn). A closed dispute never reopens.

- Stripe (https://docs.stripe.com/api/disputes/object#dispute_object-status):
  `STRIPE_DISPUTE_STATUSES`; an inquiry's `warning_closed` (closed without a chargeback) is
  `won`: no money left the merchant.
- Adyen (https://docs.adyen.com/risk-management/disputes-api/dispute-notifications):
  `ADYEN_DISPUTE_EVENTS` maps each dispute `eventCode` to a status, and
  `ADYEN_DISPUTE_STATUSES` the `additionalData.disputeStatus` of a `CHARGEBACK` item, which
  overrides the event's; the Adyen parser feeds them.
- The sandbox: its own notifications name our statuses directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

__all__ = [
    "ADYEN_DISPUTE_EVENTS",
    "ADYEN_DISPUTE_STATUSES",
    "CLOSED_DISPUTE_STATUSES",
    "DISPUTE_STATUSES",
    "STRIPE_DISPUTE_STATUSES",
    "DisputeNotice",
    "DisputeStatus",
]

DisputeStatus = Literal["needs_response", "under_review", "won", "lost"]
DISPUTE_STATUSES: tuple[DisputeStatus, ...] = ("needs_response", "under_review", "won", "lost")
CLOSED_DISPUTE_STATUSES: frozenset[str] = frozenset({"won", "lost"})

#: Stripe's `Dispute.status` -> ours.
STRIPE_DISPUTE_STATUSES: dict[str, DisputeStatus] = {
    "warning_needs_response": "needs_response",
    "warning_under_review": "under_review",
    "warning_closed": "won",
    "needs_response": "needs_response",
    "under_review": "under_review",
    "won": "won",
    "lost": "lost",
    "prevented": "won",
}

#: Adyen's dispute `eventCode` -> ours (a `CHARGEBACK` item's `disputeStatus` overrides it).
ADYEN_DISPUTE_EVENTS: dict[str, DisputeStatus] = {
    "REQUEST_FOR_INFORMATION": "needs_response",
    "NOTIFICATION_OF_CHARGEBACK": "needs_response",
    "CHARGEBACK": "under_review",
    "INFORMATION_SUPPLIED": "under_review",
    "CHARGEBACK_REVERSED": "won",
    "PREARBITRATION_WON": "won",
    "SECOND_CHARGEBACK": "lost",
    "PREARBITRATION_LOST": "lost",
}

#: A `CHARGEBACK` item's `additionalData.disputeStatus` -> ours.
ADYEN_DISPUTE_STATUSES: dict[str, DisputeStatus] = {
    "Undefended": "needs_response",
    "Pending": "under_review",
    "Responded": "under_review",
    "Won": "won",
    "Lost": "lost",
    "Accepted": "lost",
    "Expired": "lost",
}


@dataclass(frozen=True, slots=True)
class DisputeNotice:
    """One dispute as a notification reports it.

    `dispute_reference`: the provider's id of the dispute (Stripe `dp_...`); `amount`: minor
    units of `currency` (ISO 4217, upper case), what the dispute holds or withdrew; `reason`:
    the provider's reason code as given (e.g. Stripe's `fraudulent`, Adyen's reason code);
    `status`: ours (`DisputeStatus`); `evidence_due_by`: the deadline to respond (aware UTC),
    when the provider gives one; `provider_status`: the provider's own status word.
    """

    dispute_reference: str
    amount: int
    currency: str
    reason: str
    status: DisputeStatus
    evidence_due_by: datetime | None = None
    provider_status: str = ""

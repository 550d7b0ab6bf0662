"""A Stripe acquirer's records for the ledger audit: Stripe's own listings of the time range.

:class:`StripeAcquirerRecords` reads them once per audit through the acquirer room
(:func:`payments.acquirer.listings.stripe_listings`: every PaymentIntent and refund created
since the audit's start, ``created[gte]``, 100 a page, ``starting_after``, bounded pages) and
maps them to :class:`~ledger.acquirer_records.AcquirerRecord` and
:class:`~ledger.acquirer_records.AcquirerRefundRecord`:

- a PaymentIntent ``requires_capture``, ``succeeded`` or canceled after its authorization is
  ``approved``, with its capture state (captured and refunded amounts, voided); one declined,
  or canceled unpaid, is ``declined``; one with no outcome yet is no record;
- its reference is our ``metadata.payment_reference``; one made at Stripe behind our back has
  none and is filed under its own id: a record unknown to us;
- a refund's reference is our ``metadata.refund_reference``; one without it is someone else's
  (a refund unknown to us), except a partial capture's release on localstripe.

A listing that cannot be read completely raises
:class:`~ledger.acquirer_records.AcquirerRecordsError`: an audit over part of the records would
report payments Stripe "does not know".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from ledger.acquirer_records import AcquirerRecord, AcquirerRecordsError, AcquirerRefundRecord
from payments.acquirer.listings import ListingError, StripeListings, stripe_listings

__all__ = ["StripeAcquirerRecords"]


class StripeAcquirerRecords:
    """The listings of the ``stripe`` acquirer ``acquirer`` (its ``ACQUIRERS`` name), read once
    for the first ``since`` asked (the audit asks records, then refunds, with one ``since``);
    ``base_url`` only names the source in the report."""

    def __init__(self, *, acquirer: str, base_url: str) -> None:
        self.name = f"stripe listings at {base_url}"
        self._acquirer = acquirer
        self._read: tuple[datetime, StripeListings] | None = None

    def records_since(self, since: datetime) -> Iterator[AcquirerRecord]:
        """Every PaymentIntent with an outcome created at or after ``since``, oldest first."""
        for intent in self._listings(since).intents:
            yield AcquirerRecord(
                acquirer_reference=intent.acquirer_reference,
                reference=intent.payment_reference,
                status="approved" if intent.approved else "declined",
                amount=intent.amount,
                currency=intent.currency,
                created_at=intent.created_at,
                decline_code=intent.decline_code,
                amount_captured=intent.amount_captured,
                amount_refunded=intent.amount_refunded,
                voided=intent.voided,
            )

    def refunds_since(self, since: datetime) -> Iterator[AcquirerRefundRecord]:
        """Every final refund created at or after ``since``, oldest first."""
        for refund in self._listings(since).refunds:
            yield AcquirerRefundRecord(
                acquirer_reference=refund.acquirer_reference,
                charge=refund.charge,
                reference=refund.refund_reference,
                status=refund.status,
                amount=refund.amount,
                currency=refund.currency,
                created_at=refund.created_at,
                failure_code=refund.failure_code,
            )

    def _listings(self, since: datetime) -> StripeListings:
        if self._read is None or self._read[0] != since:
            try:
                self._read = (since, stripe_listings(self._acquirer, since))
            except ListingError as exc:
                raise AcquirerRecordsError(str(exc)) from exc
        return self._read[1]

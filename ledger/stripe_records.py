"""A Stripe acquirer's records for the ledger audit: Stripe's own listings of the time range.

:class:`StripeAcquirerRecords` reads every PaymentIntent and every refund created since the
audit's start (``GET /v1/payment_intents`` and ``GET /v1/refunds`` with ``created[gte]``,
100 per page, ``starting_after`` to the next page: ``gateway_client``'s Stripe listing, sent
with the connector's headers and pinned ``Stripe-Version``), and maps them to
:class:`~ledger.acquirer_records.AcquirerRecord` and
:class:`~ledger.acquirer_records.AcquirerRefundRecord`:

- a PaymentIntent ``requires_capture``, ``succeeded`` or canceled after its authorization is
  ``approved``, with its capture state (captured and refunded amounts, voided); one
  ``requires_payment_method`` with an error, or canceled unpaid, is ``declined``; one with no
  outcome yet (``processing``, ``requires_action``, never confirmed) is not a record;
- its reference is our ``metadata.payment_reference``; a PaymentIntent made at Stripe behind
  our back has none and is filed under its own id: a record unknown to us;
- a refund's reference is our ``metadata.refund_reference``; one without it is someone
  else's (a refund unknown to us), except on a charge that reports no ``amount_captured``
  (localstripe, older API versions), where it is a partial capture's release, as the dialect
  reads it, and not a refund.

Pages are bounded (``max_pages``, 500 by default: 50,000 objects per kind and audit window); a
server that refuses the ``created[gte]`` filter with a ``400`` (localstripe) is listed without
it, every object checked against the window here (the same records, more pages); a listing
longer than the bound raises :class:`~ledger.acquirer_records.AcquirerRecordsError` rather
than auditing part of it. Nothing here writes to the database; it runs outside any
transaction (``audit_acquirer`` reads the records before its queries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import httpx

from gateway_client import (
    StripeDialect,
    stripe_listed_payment_intent,
    stripe_listed_refund,
    stripe_listing_page,
    stripe_listing_request,
)
from ledger.acquirer_records import AcquirerRecord, AcquirerRecordsError, AcquirerRefundRecord

__all__ = ["StripeAcquirerRecords"]

_T = TypeVar("_T")


class StripeAcquirerRecords:
    """Stripe's listings of PaymentIntents and refunds (see the module docstring).

    ``base_url`` (``https://api.stripe.com``, or localstripe's), ``api_key`` (the secret key,
    never in a message), ``api_version`` (the pinned ``Stripe-Version``); ``timeout`` per page
    (seconds); ``max_pages`` per listing; ``transport`` for tests' ``httpx.MockTransport``.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        api_version: str,
        timeout: float = 30.0,
        max_pages: int = 500,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.name = f"stripe listings at {base_url}"
        self._base_url = base_url.rstrip("/")
        self._headers = StripeDialect(api_version=api_version).auth_headers(api_key)
        self._timeout = timeout
        self._max_pages = max_pages
        self._transport = transport
        self._created_filter = True
        # PaymentIntents whose charge reports no amount_captured: their refunds without our
        # metadata are partial captures' releases (filled by records_since).
        self._released: set[str] = set()

    def records_since(self, since: datetime) -> Iterator[AcquirerRecord]:
        """Every PaymentIntent with an outcome created at or after ``since``, oldest first."""
        records = []
        for item in self._listing("payment_intents", since):
            record = _record(item)
            if record is not None:
                records.append(record)
            charge = item.get("latest_charge")
            if isinstance(charge, dict) and "amount_captured" not in charge:
                self._released.add(item["id"])
        return iter(sorted(records, key=lambda r: (r.created_at, r.acquirer_reference)))

    def refunds_since(self, since: datetime) -> Iterator[AcquirerRefundRecord]:
        """Every final refund created at or after ``since``, oldest first (a partial capture's
        release on a charge without ``amount_captured`` left out, as the module says)."""
        refunds = []
        for item in self._listing("refunds", since):
            listed = _guarded(stripe_listed_refund, item)
            if listed is None:
                continue
            refund, ours = listed
            if not ours and refund.charge in self._released:
                continue
            refunds.append(
                AcquirerRefundRecord(
                    acquirer_reference=refund.acquirer_reference,
                    charge=refund.charge,
                    reference=refund.refund_reference,
                    status=refund.status,
                    amount=refund.amount,
                    currency=refund.currency,
                    created_at=refund.created_at,
                    failure_code=refund.failure_code,
                )
            )
        return iter(sorted(refunds, key=lambda r: (r.created_at, r.acquirer_reference)))

    def _listing(
        self, kind: Literal["payment_intents", "refunds"], since: datetime
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        after = None
        with httpx.Client(
            base_url=self._base_url,
            timeout=self._timeout,
            headers=self._headers,
            transport=self._transport,
            trust_env=False,
        ) as http:
            for _ in range(self._max_pages):
                request = stripe_listing_request(
                    kind, since, after, created_filter=self._created_filter
                )
                try:
                    page, has_more = self._page(http, request.path, request.params)
                except _FilterRefused:
                    self._created_filter = False  # localstripe: filtered here instead
                    continue
                items.extend(page)
                if not has_more or not page:
                    # Every item is checked here too: the filter may be off, or a fake's.
                    return [item for item in items if _created(item) >= since]
                after = page[-1]["id"]
        raise AcquirerRecordsError(
            f"Stripe's {kind} listing has more than {self._max_pages} pages: not audited in part."
        )

    def _page(
        self, http: httpx.Client, path: str, params: tuple[tuple[str, str], ...]
    ) -> tuple[list[dict[str, Any]], bool]:
        try:
            response = http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise AcquirerRecordsError(
                f"Could not read Stripe's records from {self._base_url}: {type(exc).__name__}."
            ) from exc
        if (
            response.status_code == 400
            and self._created_filter
            and "starting_after" not in dict(params)
        ):
            raise _FilterRefused
        if response.status_code != 200:
            raise AcquirerRecordsError(f"Stripe answered {response.status_code} to {path}.")
        try:
            return stripe_listing_page(response.content)
        except ValueError as exc:  # MalformedBody: the message names a field, never a value
            raise AcquirerRecordsError(f"Stripe's listing {path} is malformed: {exc}") from exc


class _FilterRefused(Exception):
    """The first page with ``created[gte]`` was answered 400 (localstripe knows no filter)."""


def _created(item: dict[str, Any]) -> datetime:
    created = item.get("created")
    if type(created) is not int:
        raise AcquirerRecordsError("An object in Stripe's listing has no 'created' time.")
    return datetime.fromtimestamp(created, tz=UTC)


def _record(item: dict[str, Any]) -> AcquirerRecord | None:
    intent = _guarded(stripe_listed_payment_intent, item)
    if intent is None:
        return None
    return AcquirerRecord(
        acquirer_reference=intent.acquirer_reference,
        reference=intent.payment_reference,
        status="approved" if intent.approved else "declined",
        amount=intent.amount,
        currency=intent.currency,
        created_at=intent.created_at,
        decline_code=intent.decline_code,
        amount_captured=intent.amount_captured if intent.approved else 0,
        amount_refunded=intent.amount_refunded if intent.approved else 0,
        voided=intent.voided,
    )


def _guarded(read: Callable[[dict[str, Any]], _T], item: dict[str, Any]) -> _T:
    try:
        return read(item)
    except ValueError as exc:
        raise AcquirerRecordsError(f"An object in Stripe's listing is malformed: {exc}") from exc

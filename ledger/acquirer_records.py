"""The acquirer's records of our authorizations and refunds, as the ledger audit reads them.

:class:`AcquirerRecords` is the interface: "every authorization the acquirer recorded for us
since T", each as an :class:`AcquirerRecord` (what the acquirer says happened: its id, our
reference, approved or declined, amount and currency, and its capture state now: captured and
refunded totals, voided), and "every refund it recorded since T", each as an
:class:`AcquirerRefundRecord` (its id, the charge, our refund id as reference, amount,
succeeded or failed). An audit never needs more.

:class:`SandboxAcquirerRecords` fills it from the sandbox acquirer's settlement listings
(``GET /_sandbox/charges?since=`` and ``GET /_sandbox/refunds?since=``, paged, no lookup lag).
:mod:`ledger.stripe_records` fills it from Stripe's listings, :mod:`ledger.adyen_records` from
what Adyen answered and notified; :mod:`ledger.sources` picks one per acquirer type. Another
source (a settlement report file) fills the same interface: map each line to an
:class:`AcquirerRecord` and name the class in ``LEDGER_ACQUIRER_RECORDS``.

Errors reading the records raise :class:`AcquirerRecordsError`, whose message never holds the
API key or a response body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol, TypeVar, runtime_checkable

import httpx

__all__ = [
    "AcquirerRecord",
    "AcquirerRecords",
    "AcquirerRecordsError",
    "AcquirerRefundRecord",
    "SandboxAcquirerRecords",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class AcquirerRecord:
    """One authorization as the acquirer recorded it.

    ``acquirer_reference`` is the acquirer's id (our payment's ``acquirer_reference``);
    ``reference`` is what we sent as the reference, our payment id; ``status`` is
    ``approved`` or ``declined`` (or, for a customer action, ``requires_action`` while the
    shopper is awaited and ``canceled`` once voided unfinished); ``amount`` in minor units
    of ``currency``; ``created_at`` when the acquirer recorded it (aware).
    ``idempotency_key`` when the source knows it.
    The capture state as it is now, when the source reports it (None: not reported, the audit
    then compares presence, status and amount only): ``amount_captured`` and
    ``amount_refunded`` (the sum of the succeeded refunds) in minor units, ``voided``.
    """

    acquirer_reference: str
    reference: str
    status: Literal["approved", "declined", "requires_action", "canceled"]
    amount: int
    currency: str
    created_at: datetime
    decline_code: str | None = None
    idempotency_key: str | None = None
    amount_captured: int | None = None
    amount_refunded: int | None = None
    voided: bool | None = None


@dataclass(frozen=True, slots=True)
class AcquirerRefundRecord:
    """One refund as the acquirer recorded it.

    ``acquirer_reference`` is the acquirer's refund id (our refund's ``acquirer_reference``);
    ``charge`` the acquirer's id of the refunded charge; ``reference`` what we sent, our refund
    id (``re_...``); ``status`` ``succeeded`` or ``failed`` (``failure_code`` then); ``amount``
    in minor units of ``currency``; ``created_at`` when the acquirer recorded it (aware).
    """

    acquirer_reference: str
    charge: str
    reference: str
    status: Literal["succeeded", "failed"]
    amount: int
    currency: str
    created_at: datetime
    failure_code: str | None = None
    idempotency_key: str | None = None


class AcquirerRecordsError(Exception):
    """The acquirer's records could not be read (unreachable, refused, malformed)."""


@runtime_checkable
class AcquirerRecords(Protocol):
    """A source of the acquirer's records. ``name`` says which, for the audit's report."""

    name: str

    def records_since(self, since: datetime) -> Iterator[AcquirerRecord]:
        """Every record with ``created_at >= since`` (aware), oldest first.

        Raises :class:`AcquirerRecordsError` when they cannot be read completely: an audit
        over part of the records would report payments the acquirer "does not know".
        """
        ...

    def refunds_since(self, since: datetime) -> Iterator[AcquirerRefundRecord]:
        """Every refund record (succeeded and failed) with ``created_at >= since``, oldest
        first. Raises :class:`AcquirerRecordsError` as :meth:`records_since`."""
        ...


class SandboxAcquirerRecords:
    """The sandbox acquirer's settlement listings, ``GET /_sandbox/charges`` and
    ``GET /_sandbox/refunds``, read page by page.

    ``base_url`` and ``api_key`` are the acquirer's (the listing is scoped to our account);
    ``transport`` lets unit tests use ``httpx.MockTransport``.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout: float = 30.0,
        page_size: int = 1000,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.name = f"sandbox acquirer at {base_url}"
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._page_size = page_size
        self._transport = transport

    def records_since(self, since: datetime) -> Iterator[AcquirerRecord]:
        return self._listing("/_sandbox/charges", since, _record)

    def refunds_since(self, since: datetime) -> Iterator[AcquirerRefundRecord]:
        return self._listing("/_sandbox/refunds", since, _refund_record)

    def _listing(self, path: str, since: datetime, parse: Callable[[dict], _T]) -> Iterator[_T]:
        if since.tzinfo is None:
            raise ValueError("since must be timezone-aware")
        query = {
            "since": since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "limit": str(self._page_size),
        }
        with httpx.Client(
            base_url=self._base_url,
            timeout=self._timeout,
            headers={"Authorization": f"Bearer {self._api_key}"},
            transport=self._transport,
            trust_env=False,
        ) as http:
            while True:
                page = self._page(http, path, query)
                rows = page.get("data")
                if not isinstance(rows, list):
                    raise AcquirerRecordsError("The acquirer's listing has no 'data' list.")
                for row in rows:
                    yield parse(row)
                if not page.get("has_more") or not rows:
                    return
                query = {**query, "starting_after": rows[-1]["id"]}

    def _page(self, http: httpx.Client, path: str, query: dict[str, str]) -> dict:
        try:
            response = http.get(path, params=query)
        except httpx.HTTPError as exc:
            raise AcquirerRecordsError(
                f"Could not read the acquirer's records from {self._base_url}: "
                f"{type(exc).__name__}."
            ) from exc
        if response.status_code != 200:
            raise AcquirerRecordsError(
                f"The acquirer answered {response.status_code} to the records listing."
            )
        try:
            return response.json()
        except ValueError as exc:
            raise AcquirerRecordsError("The acquirer's listing is not JSON.") from exc


def _created_at(row: dict) -> datetime:
    created_at = datetime.fromisoformat(row["created_at"])
    if created_at.tzinfo is None:
        raise ValueError("naive created_at")
    return created_at


def _record(row: dict) -> AcquirerRecord:
    try:
        created_at = _created_at(row)
        if row["status"] not in ("approved", "declined", "requires_action", "canceled"):
            raise ValueError("unknown status")  # noqa: TRY301 - one except below for every malformation
        return AcquirerRecord(
            acquirer_reference=str(row["id"]),
            reference=str(row["reference"]),
            status=row["status"],
            amount=int(row["amount"]),
            currency=str(row["currency"]),
            created_at=created_at,
            decline_code=row.get("decline_code"),
            idempotency_key=row.get("idempotency_key"),
            amount_captured=_optional_int(row, "amount_captured"),
            amount_refunded=_optional_int(row, "amount_refunded"),
            voided=_optional_bool(row, "voided"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AcquirerRecordsError("A record in the acquirer's listing is malformed.") from exc


def _optional_int(row: dict, name: str) -> int | None:
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is not a non-negative integer")
    return value


def _optional_bool(row: dict, name: str) -> bool | None:
    value = row.get(name)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} is not a boolean")
    return value


def _refund_record(row: dict) -> AcquirerRefundRecord:
    try:
        created_at = _created_at(row)
        if row["status"] not in ("succeeded", "failed"):
            raise ValueError("unknown status")  # noqa: TRY301 - one except below for every malformation
        return AcquirerRefundRecord(
            acquirer_reference=str(row["id"]),
            charge=str(row["charge"]),
            reference=str(row["reference"]),
            status=row["status"],
            amount=int(row["amount"]),
            currency=str(row["currency"]),
            created_at=created_at,
            failure_code=row.get("failure_code"),
            idempotency_key=row.get("idempotency_key"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AcquirerRecordsError("A refund in the acquirer's listing is malformed.") from exc

"""A provider's own listings of a time range, for the ledger audit (docs/connectors.md, "The
ledger audit per provider"): today Stripe's, the only provider of ours with a listing API that
the sandbox's settlement listing does not already cover.

:func:`stripe_listings` reads every PaymentIntent and every refund created since a moment at a
``stripe`` acquirer, page by page (``gateway_client``'s Stripe listing: ``created[gte]``, 100
a page, ``starting_after``), with the connector's headers and pinned ``Stripe-Version``.

- A PaymentIntent with an outcome (``requires_capture``, ``succeeded``, canceled, declined) is
  kept as an ``Authorization``; one never confirmed or still ``processing`` moved no money and
  is left out. One made at Stripe behind our back carries no ``metadata.payment_reference``
  and is filed under its own id.
- A refund is kept as a ``Refund`` (its reference ours, else its own id), except a refund
  without our metadata on a charge that reports no ``amount_captured`` (localstripe, older API
  versions), which the dialect reads as a partial capture's release, not a refund.
- Pages are bounded (``max_pages``): a longer listing raises :class:`ListingError` rather than
  return part of it. A server that refuses ``created[gte]`` with a ``400`` (localstripe) is
  listed without it, and every object is checked against the window here: the same objects,
  more pages.

Plain HTTP GETs, never inside a transaction (the audit calls it before its queries); nothing is
written. Errors never hold the API key or a body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import httpx

from gateway_client import (
    Authorization,
    Refund,
    StripeDialect,
    stripe_listed_payment_intent,
    stripe_listed_refund,
    stripe_listing_page,
    stripe_listing_request,
)
from payments.acquirer.client import acquirer_spec

__all__ = ["ListingError", "StripeListings", "stripe_listings"]

_T = TypeVar("_T")
_V = TypeVar("_V")


class ListingError(Exception):
    """The listing could not be read completely (unreachable, refused, malformed, too long).
    The message names the acquirer's address and the field, never a key or a body."""


@dataclass(frozen=True, slots=True)
class StripeListings:
    """What a Stripe acquirer recorded since the moment asked: ``intents`` (PaymentIntents with
    an outcome, oldest first) and ``refunds`` (final refunds, oldest first), amounts in our
    minor units (ISO 4217)."""

    intents: tuple[Authorization, ...]
    refunds: tuple[Refund, ...]


def stripe_listings(
    acquirer: str,
    since: datetime,
    *,
    timeout: float = 30.0,
    max_pages: int = 500,
    transport: httpx.BaseTransport | None = None,
) -> StripeListings:
    """The listings of the ``stripe`` acquirer ``acquirer`` (its ``ACQUIRERS`` name) since
    ``since`` (aware), as the module docstring says. ``max_pages`` of 100 objects per kind;
    ``transport`` for tests. Raises :class:`ListingError`; ``UnknownAcquirer`` for a name not
    configured; ValueError for an acquirer of another type or a naive ``since``."""
    spec = acquirer_spec(acquirer)
    if spec.type != "stripe" or spec.api_version is None:
        raise ValueError(f"{acquirer} is not a stripe acquirer")
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware")
    headers = StripeDialect(api_version=spec.api_version).auth_headers(spec.api_key)
    reader = _Reader(spec.base_url, headers, timeout, max_pages, transport)
    intents: list[Authorization] = []
    released: set[str] = set()
    for item in reader.listing("payment_intents", since):
        charge = item.get("latest_charge")
        if isinstance(charge, dict) and "amount_captured" not in charge:
            released.add(item["id"])
        intent = _read(stripe_listed_payment_intent, item, reader.base_url)
        if intent is not None:
            intents.append(intent)
    refunds: list[Refund] = []
    for item in reader.listing("refunds", since):
        listed = _read(stripe_listed_refund, item, reader.base_url)
        if listed is not None and (listed[1] or listed[0].charge not in released):
            refunds.append(listed[0])
    return StripeListings(
        intents=tuple(sorted(intents, key=lambda i: (i.created_at, i.acquirer_reference))),
        refunds=tuple(sorted(refunds, key=lambda r: (r.created_at, r.acquirer_reference))),
    )


class _Reader:
    """One listing's pages, over one HTTP client per listing (``trust_env`` off)."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        max_pages: int,
        transport: httpx.BaseTransport | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers, self._timeout = headers, timeout
        self._max_pages, self._transport = max_pages, transport
        self._created_filter = True

    def listing(
        self, kind: Literal["payment_intents", "refunds"], since: datetime
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        after = None
        with httpx.Client(
            base_url=self.base_url, timeout=self._timeout, headers=self._headers,
            transport=self._transport, trust_env=False,
        ) as http:  # fmt: skip
            for _ in range(self._max_pages):
                request = stripe_listing_request(
                    kind, since, after, created_filter=self._created_filter
                )
                response = self._get(http, request.path, request.params)
                if response is None:  # the filter refused: list without it, check here
                    self._created_filter = False
                    continue
                page, has_more = _read(stripe_listing_page, response.content, self.base_url)
                items.extend(page)
                if not has_more or not page:
                    return [item for item in items if _created(item, self.base_url) >= since]
                after = page[-1]["id"]
        raise ListingError(
            f"The {kind} listing of {self.base_url} has more than {self._max_pages} pages."
        )

    def _get(
        self, http: httpx.Client, path: str, params: tuple[tuple[str, str], ...]
    ) -> httpx.Response | None:
        try:
            response = http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ListingError(
                f"Could not read the listing {path} of {self.base_url}: {type(exc).__name__}."
            ) from exc
        first = not any(name == "starting_after" for name, _ in params)
        if response.status_code == 400 and first and self._created_filter:
            return None
        if response.status_code != 200:
            raise ListingError(f"{self.base_url} answered {response.status_code} to {path}.")
        return response


def _read(read: Callable[[_V], _T], value: _V, where: str) -> _T:
    try:
        return read(value)
    except ValueError as exc:  # MalformedBody: its message names a field, never a value
        raise ListingError(f"A listing of {where} is malformed: {exc}") from exc


def _created(item: dict[str, Any], where: str) -> datetime:
    created = item.get("created")
    if type(created) is not int:
        raise ListingError(f"An object in a listing of {where} has no 'created' time.")
    return datetime.fromtimestamp(created, tz=UTC)

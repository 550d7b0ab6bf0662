"""
Stripe's listings of a time range, for an audit of what Stripe recorded (the ledger audit's
Stripe source): every PaymentIntent and every refund created since a moment, page by page.

- `stripe_listing_request(kind, since, after)`: `GET /v1/payment_intents` (each with its
  `latest_charge` expanded) or `GET /v1/refunds`, `created[gte]=<Unix seconds>`,
  `limit=100`, and from the second page `starting_after=<the previous page's last id>`
  (Stripe lists newest first). Sent with `StripeDialect.auth_headers` (the pinned
  `Stripe-Version`).
- `stripe_listing_page(body)`: a page's items and whether more follow (`has_more`);
  MalformedBody for anything that is not a Stripe list of objects with ids.
- `stripe_listed_payment_intent(item)`: a PaymentIntent as an `Authorization` with its capture
  state (`StripeDialect`'s own decoding); None for one with no outcome yet (`processing`,
  `requires_action`, `requires_confirmation`, or `requires_payment_method` never confirmed:
  no money moved). One created behind our back has no `metadata.payment_reference`: its
  `payment_reference` is then its own id, which names none of our payments.
- `stripe_listed_refund(item)`: a refund as a `Refund` and whether it is ours, or None for a
  refund still `pending`; one without our `metadata.refund_reference` gets its own id as
  reference.

Amounts are our minor units (ISO 4217), converted as the dialect does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from .dialect import WireRequest
from .stripe import _intent, _refund
from .types import Authorization, Refund
from .wire import MalformedBody, load_json_object

__all__ = [
    "STRIPE_LISTING_PAGE_SIZE",
    "stripe_listed_payment_intent",
    "stripe_listed_refund",
    "stripe_listing_page",
    "stripe_listing_request",
]

#: Objects per page (Stripe's maximum).
STRIPE_LISTING_PAGE_SIZE = 100
_PATHS = {"payment_intents": "/v1/payment_intents", "refunds": "/v1/refunds"}
_NOT_YET = frozenset({"processing", "requires_action", "requires_confirmation"})


def stripe_listing_request(
    kind: Literal["payment_intents", "refunds"],
    since: datetime,
    after: str | None = None,
    *,
    created_filter: bool = True,
) -> WireRequest:
    """The request of one page of `kind` created at or after `since` (aware), newest first;
    `after`: the previous page's last id. `created_filter` False leaves `created[gte]` out
    (a fake that refuses it, localstripe: the caller then filters on `created` itself).
    ValueError for a naive `since`."""
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware")
    params = [("limit", str(STRIPE_LISTING_PAGE_SIZE))]
    if created_filter:
        params.insert(0, ("created[gte]", str(int(since.timestamp()))))
    if kind == "payment_intents":
        params.append(("expand[0]", "data.latest_charge"))
    if after is not None:
        params.append(("starting_after", after))
    return WireRequest("GET", _PATHS[kind], params=tuple(params))


def stripe_listing_page(body: bytes | None) -> tuple[list[dict[str, Any]], bool]:
    """A page's items (JSON objects, each with a string `id`) and `has_more`. MalformedBody
    naming the field for anything else."""
    document = load_json_object(body)
    items = document.get("data")
    if document.get("object") != "list" or not isinstance(items, list):
        raise MalformedBody("body is not a Stripe list object")
    if not all(isinstance(item, dict) and isinstance(item.get("id"), str) for item in items):
        raise MalformedBody("a listed item is not an object with an 'id'")
    has_more = document.get("has_more")
    if not isinstance(has_more, bool):
        raise MalformedBody("field 'has_more' is missing or not a boolean")
    return items, has_more


def stripe_listed_payment_intent(item: dict[str, Any]) -> Authorization | None:
    """One listed PaymentIntent (see the module docstring). MalformedBody naming the field."""
    status = item.get("status")
    if status in _NOT_YET or (
        status == "requires_payment_method" and not isinstance(item.get("last_payment_error"), dict)
    ):
        return None
    intent = _intent(_with_reference(item, "payment"), "data[]", False)
    # `requires_action` is among _NOT_YET: a listed intent is never ActionRequired.
    return intent if isinstance(intent, Authorization) else None


def stripe_listed_refund(item: dict[str, Any]) -> tuple[Refund, bool] | None:
    """One listed refund and whether it carries our `metadata.refund_reference`; None while
    it is `pending`. MalformedBody naming the field."""
    if item.get("status") in ("pending", "requires_action"):
        return None
    metadata = item.get("metadata")
    ours = isinstance(metadata, dict) and isinstance(metadata.get("refund_reference"), str)
    return _refund(_with_reference(item, "refund"), "data[]", False), ours


def _with_reference(item: dict[str, Any], kind: str) -> dict[str, Any]:
    """`item` itself when it carries our `metadata.<kind>_reference`, else a copy whose
    reference is its own id (a record none of ours is filed under)."""
    metadata = item.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    if isinstance(metadata.get(f"{kind}_reference"), str):
        return item
    return {**item, "metadata": {**metadata, f"{kind}_reference": item["id"]}}

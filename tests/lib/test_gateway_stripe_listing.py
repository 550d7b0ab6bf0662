"""Stripe's listings of a time range (gateway_client/stripe_listing.py), read by the ledger
audit: the requests, a page, and each object as a record or as no record (no outcome yet)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gateway_client import (
    stripe_listed_payment_intent,
    stripe_listed_refund,
    stripe_listing_page,
    stripe_listing_request,
)
from gateway_client.wire import MalformedBody

SINCE = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def intent(**fields):
    return {
        "id": "pi_1", "object": "payment_intent", "amount": 1000, "currency": "jpy",
        "created": 1764583200, "status": "requires_capture",
        "metadata": {"payment_reference": "pay_1"}, **fields,
    }  # fmt: skip


def test_the_requests_filter_by_creation_and_page_after_the_last_id():
    first = stripe_listing_request("payment_intents", SINCE)
    assert (first.method, first.path) == ("GET", "/v1/payment_intents")
    assert first.params == (
        ("created[gte]", "1796119200"), ("limit", "100"), ("expand[0]", "data.latest_charge"),
    )  # fmt: skip
    following = stripe_listing_request("refunds", SINCE, "re_9", created_filter=False)
    assert following.params == (("limit", "100"), ("starting_after", "re_9"))
    with pytest.raises(ValueError, match="timezone-aware"):
        stripe_listing_request("refunds", datetime(2026, 12, 1))


def test_a_page_is_a_list_of_objects_with_ids_and_says_whether_more_follow():
    body = json.dumps({"object": "list", "data": [intent()], "has_more": True}).encode()
    assert stripe_listing_page(body) == ([intent()], True)
    for broken, field in (
        ({"object": "list", "data": [{"amount": 1}], "has_more": False}, "'id'"),
        ({"object": "list", "data": []}, "has_more"),
        ({"object": "payment_intent"}, "list object"),
    ):
        with pytest.raises(MalformedBody, match=field):
            stripe_listing_page(json.dumps(broken).encode())


def test_a_payment_intent_is_a_record_only_once_it_has_an_outcome():
    held = stripe_listed_payment_intent(intent())
    assert held is not None
    assert (held.acquirer_reference, held.payment_reference, held.approved, held.amount) == (
        "pi_1", "pay_1", True, 1000,
    )  # fmt: skip
    for status in ("processing", "requires_action", "requires_confirmation"):
        assert stripe_listed_payment_intent(intent(status=status)) is None
    assert stripe_listed_payment_intent(intent(status="requires_payment_method")) is None
    declined = stripe_listed_payment_intent(
        intent(status="requires_payment_method",
               last_payment_error={"code": "card_declined", "decline_code": "do_not_honor"})
    )  # fmt: skip
    assert declined is not None and (declined.approved, declined.decline_code) == (
        False, "do_not_honor",
    )  # fmt: skip


def test_an_object_without_our_reference_is_filed_under_its_own_id():
    stranger = stripe_listed_payment_intent(intent(id="pi_stranger", metadata={}))
    assert stranger is not None and stranger.payment_reference == "pi_stranger"
    refund = {
        "id": "re_1", "object": "refund", "amount": 300, "currency": "eur",
        "created": 1764583300, "status": "succeeded", "payment_intent": "pi_1", "metadata": {},
    }  # fmt: skip
    listed = stripe_listed_refund(refund)
    assert listed is not None
    assert (listed[0].refund_reference, listed[0].amount, listed[1]) == ("re_1", 300, False)
    ours = stripe_listed_refund({**refund, "metadata": {"refund_reference": "re_ours"}})
    assert ours is not None and (ours[0].refund_reference, ours[1]) == ("re_ours", True)
    assert stripe_listed_refund({**refund, "status": "pending"}) is None

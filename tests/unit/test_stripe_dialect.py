"""
The Stripe dialect (gateway_client/stripe.py) without a network: the failure table as a table
test (status, headers, body) -> classification, retry or not, wait, through the real client and
retry loop (httpx.MockTransport stands in for Stripe's network only); the requests built; the
decoders on Stripe's own published examples (tests/data/stripe/fixtures3-excerpt.json, MIT);
amounts in zero-decimal and special-case currencies.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    ActionRequired,
    AuthenticationError,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    RateLimitedError,
    Refund,
    RefundRequest,
    UpstreamServerError,
    VoidRequest,
)
from gateway_client._call import Answer
from gateway_client._lookup_pages import LOOKUP_PAGES
from gateway_client.stripe import (
    DEFAULT_STRIPE_API_VERSION,
    StripeDialect,
    from_stripe_amount,
    to_stripe_amount,
)
from gateway_client.wire import MalformedBody
from tests.support.dialects import scripted_client

FIXTURES = json.loads(
    (Path(__file__).parents[1] / "data" / "stripe" / "fixtures3-excerpt.json").read_text()
)["resources"]
SECRET = "sk_test_51Conn3ctorsS3am"
KEY = "acq_2f9d6c1e-connectors"
REFERENCE = "pay_01STRIPE"


def intent(status: str = "succeeded", **overrides: Any) -> dict[str, Any]:
    """Stripe's published PaymentIntent example, as our authorization would be answered."""
    document = copy.deepcopy(FIXTURES["payment_intent"])
    charge = copy.deepcopy(FIXTURES["charge"])
    charge.update(amount=1099, amount_captured=1099, captured=True, status="succeeded")
    document.update(
        status=status,
        currency="eur",
        metadata={"payment_reference": REFERENCE},
        latest_charge=charge,
        last_payment_error=None,
        amount_received=1099 if status == "succeeded" else 0,
    )
    document.update(overrides)
    return document


def request(capture: bool = True, **overrides: Any) -> AuthorizationRequest:
    fields: dict[str, Any] = {
        "amount": 1099,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
        "payment_reference": REFERENCE,
        "idempotency_key": KEY,
        "capture": capture,
    }
    fields.update(overrides)
    return AuthorizationRequest(**fields)


def stripe_error(status: int, error: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": error}, headers=headers)


def client(
    answers: list[httpx.Response], *, honours_keys: bool = True
) -> tuple[AcquirerClient, list[httpx.Request], list[float]]:
    return scripted_client(
        StripeDialect(),
        answers,
        base_url="https://api.stripe.test",
        api_key=SECRET,
        honours_keys=honours_keys,
    )


OK = httpx.Response(200, json=intent(), headers={"Request-Id": "req_ok"})
HTML_502 = httpx.Response(502, content=b"<html><body>Bad Gateway</body></html>")

# (name, first answer, honours keys, expected class or "approved"/"declined", attempts, wait)
# `wait`: the sleep before the second attempt (seconds; backoff with random 0.5 is 0.1 s),
# None when no second attempt was made.
TABLE: list[tuple[str, httpx.Response, bool, Any, int, float | None]] = [
    ("200 succeeded", OK, True, "approved", 1, None),
    (
        "402 card_error: a decline with its decline_code",
        stripe_error(
            402,
            {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": "insufficient_funds",
                "payment_intent": {"id": "pi_declined", "created": 1764633600},
            },
        ),
        True,
        "declined",
        1,
        None,
    ),
    (
        "429: binds nothing, retried",
        stripe_error(429, {"type": "rate_limit_error"}),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "429 Retry-After 2: retried after it",
        stripe_error(429, {"type": "rate_limit_error"}, **{"Retry-After": "2"}),
        True,
        "approved",
        2,
        2.1,
    ),
    (
        "429 Stripe-Should-Retry false: not retried",
        stripe_error(429, {"type": "rate_limit_error"}, **{"Stripe-Should-Retry": "false"}),
        True,
        RateLimitedError,
        1,
        None,
    ),
    (
        "429 Stripe-Should-Retry true: retried",
        stripe_error(429, {"type": "rate_limit_error"}, **{"Stripe-Should-Retry": "true"}),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "400 idempotency_error: permanent, never retried",
        stripe_error(
            400, {"type": "idempotency_error", "message": "Keys for idempotent requests..."}
        ),
        True,
        InvalidRequestError,
        1,
        None,
    ),
    (
        "400 lock_timeout with Stripe-Should-Retry true: retried",
        stripe_error(
            400,
            {"type": "invalid_request_error", "code": "lock_timeout"},
            **{"Stripe-Should-Retry": "true"},
        ),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "409 key in flight, Should-Retry true: retried with the same key",
        stripe_error(409, {"type": "idempotency_error"}, **{"Stripe-Should-Retry": "true"}),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "409 where keys are not honoured: ambiguous, not retried",
        stripe_error(409, {"type": "idempotency_error"}),
        False,
        IdempotencyConflictError,
        1,
        None,
    ),
    (
        "500: ambiguous, retried with the key Stripe keeps",
        stripe_error(500, {"type": "api_error"}),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "500 Stripe-Should-Retry false: not retried",
        stripe_error(500, {"type": "api_error"}, **{"Stripe-Should-Retry": "false"}),
        True,
        UpstreamServerError,
        1,
        None,
    ),
    (
        "500 where keys are not honoured: not retried",
        stripe_error(500, {"type": "api_error"}),
        False,
        UpstreamServerError,
        1,
        None,
    ),
    (
        "502 HTML where keys are not honoured: ambiguous, never succeeded",
        HTML_502,
        False,
        UpstreamServerError,
        1,
        None,
    ),
    (
        "503: ambiguous at Stripe, not 'not applied'",
        stripe_error(503, {"type": "api_error"}),
        False,
        UpstreamServerError,
        1,
        None,
    ),
    (
        "401: permanent",
        stripe_error(401, {"type": "invalid_request_error"}),
        True,
        AuthenticationError,
        1,
        None,
    ),
    (
        "404 resource_missing: permanent",
        stripe_error(404, {"type": "invalid_request_error", "code": "resource_missing"}),
        True,
        InvalidRequestError,
        1,
        None,
    ),
    (
        "200 processing: no outcome yet, ambiguous",
        httpx.Response(200, json=intent("processing")),
        False,
        MalformedResponseError,
        1,
        None,
    ),
]


@pytest.mark.parametrize(
    ("first", "honours", "expected", "attempts", "wait"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_failure_table(
    first: httpx.Response, honours: bool, expected: Any, attempts: int, wait: float | None
) -> None:
    built, sent, slept = client([first, OK], honours_keys=honours)
    if isinstance(expected, str):
        result = built.authorize(request())
        assert isinstance(result, Authorization)
        assert result.approved is (expected == "approved")
        assert result.attempts == attempts
        if expected == "declined":
            assert result.decline_code == "insufficient_funds"
            assert result.acquirer_reference == "pi_declined"
        else:
            assert (result.amount, result.amount_captured, result.captured) == (1099, 1099, True)
    else:
        with pytest.raises(expected) as raised:
            built.authorize(request())
        assert raised.value.attempts == attempts
    assert len(sent) == attempts
    assert {r.headers["Idempotency-Key"] for r in sent} == {KEY}  # one key, every attempt
    assert slept == ([] if wait is None else [pytest.approx(wait)])


def test_idempotency_error_names_its_code_and_the_provider_retry_hint() -> None:
    built, _, _ = client([stripe_error(400, {"type": "idempotency_error"})])
    with pytest.raises(InvalidRequestError) as raised:
        built.authorize(request())
    assert raised.value.acquirer_code == "idempotency_error"
    assert raised.value.provider_retry is None
    assert SECRET not in str(raised.value)


def test_request_id_is_recorded_on_every_attempt() -> None:
    first = stripe_error(500, {"type": "api_error"}, **{"Request-Id": "req_first"})
    built, _, _ = client([first, OK])
    result = built.authorize(request())
    assert [r.provider_request_id for r in result.attempt_log] == ["req_first", "req_ok"]
    assert result.attempt_log[0].as_dict()["provider_request_id"] == "req_first"


def test_authorize_request_is_one_confirmed_payment_intent_with_our_reference() -> None:
    built, sent, _ = client([httpx.Response(200, json=intent("requires_capture"))])
    held = built.authorize(request(capture=False))
    assert (held.approved, held.captured, held.amount_captured) == (True, False, 0)
    (http_request,) = sent
    assert http_request.url.path == "/v1/payment_intents"
    assert http_request.headers["Stripe-Version"] == DEFAULT_STRIPE_API_VERSION
    assert http_request.headers["Authorization"] == f"Bearer {SECRET}"
    assert http_request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert dict(parse_qsl(http_request.content.decode())) == {
        "amount": "1099",
        "currency": "eur",
        "payment_method": "pm_card_visa",
        "payment_method_types[0]": "card",
        "confirm": "true",
        "capture_method": "manual",
        "metadata[payment_reference]": REFERENCE,
        "expand[0]": "latest_charge",
    }


def test_partial_capture_void_and_refund_requests_and_answers() -> None:
    captured = intent(amount_received=800)
    captured["latest_charge"].update(amount_captured=800)
    refund = copy.deepcopy(FIXTURES["refund"])
    refund.update(
        amount=300,
        currency="eur",
        payment_intent=captured["id"],
        metadata={"refund_reference": "rf_1"},
    )
    voided = intent("canceled", canceled_at=1764633700)
    built, sent, _ = client(
        [
            httpx.Response(200, json=captured),
            httpx.Response(200, json=voided),
            httpx.Response(200, json=refund),
        ]
    )
    pi = captured["id"]
    charge = built.capture(CaptureRequest(pi, 800, "capture-1"))
    assert (charge.captured, charge.amount_captured, charge.amount) == (True, 800, 1099)
    assert built.void(VoidRequest(pi, "void-1")).voided is True
    got = built.refund(RefundRequest(pi, "rf_1", 300, "refund-1"))
    assert isinstance(got, Refund)
    assert (got.amount, got.status, got.charge) == (300, "succeeded", pi)
    assert [r.url.path for r in sent] == [
        f"/v1/payment_intents/{pi}/capture",
        f"/v1/payment_intents/{pi}/cancel",
        "/v1/refunds",
    ]
    assert dict(parse_qsl(sent[0].content.decode()))["amount_to_capture"] == "800"
    assert dict(parse_qsl(sent[2].content.decode())) == {
        "payment_intent": pi,
        "amount": "300",
        "metadata[refund_reference]": "rf_1",
    }


def test_a_capture_answered_for_another_amount_is_ambiguous() -> None:
    # Captured 1099 where 800 was asked; keys not honoured, so no re-send.
    built, _, _ = client([httpx.Response(200, json=intent())], honours_keys=False)
    with pytest.raises(MalformedResponseError):
        built.capture(CaptureRequest(intent()["id"], 800, "capture-1"))


def _answer(document: Any, status: int = 200) -> Answer:
    return Answer(status, httpx.Headers(), json.dumps(document).encode())


def test_lookup_keeps_only_our_payment_and_says_none_only_of_a_complete_listing() -> None:
    dialect = StripeDialect()
    ours, theirs = intent(), intent(metadata={"payment_reference": "pay_other"})
    listing = {"object": "list", "data": [theirs, ours], "has_more": False}
    (found,) = dialect.decode_lookup(_answer(listing), REFERENCE)
    assert (found.payment_reference, found.amount_captured) == (REFERENCE, 1099)
    assert dialect.decode_lookup(_answer({**listing, "data": [theirs]}), REFERENCE) == []
    with pytest.raises(MalformedBody, match="has_more"):
        dialect.decode_lookup(_answer({**listing, "data": [theirs], "has_more": True}), REFERENCE)


def test_published_examples_decode() -> None:
    dialect = StripeDialect()
    # The published PaymentIntent as it is: no metadata of ours, so not ours (MalformedBody).
    with pytest.raises(MalformedBody, match="payment_reference"):
        dialect.decode_authorization(_answer(FIXTURES["payment_intent"]), request())
    # Its shape with our reference and a decline: a declined Authorization.
    declined = intent(
        "requires_payment_method",
        last_payment_error={
            "type": "card_error",
            "code": "card_declined",
            "decline_code": "do_not_honor",
        },
    )
    result = dialect.decode_authorization(_answer(declined), request())
    assert (result.approved, result.decline_code) == (False, "do_not_honor")
    assert result.created_at.year == 2009  # the fixture's 1234567890
    # The published refund with our reference.
    refund = copy.deepcopy(FIXTURES["refund"])
    refund.update(payment_intent="pi_1", metadata={"refund_reference": "rf_9"})
    got = dialect.decode_refund(_answer(refund), RefundRequest("pi_1", "rf_9", 100, "k-9"))
    assert (got.amount, got.currency, got.status) == (100, "USD", "succeeded")
    # The published charge unexpanded (an id string): a succeeded intent cannot be read.
    unexpanded = intent(latest_charge=FIXTURES["charge"]["id"])
    with pytest.raises(MalformedBody, match="latest_charge"):
        dialect.decode_authorization(_answer(unexpanded), request())


@pytest.mark.parametrize(
    ("currency", "ours", "stripes"),
    [
        ("EUR", 1099, 1099),
        ("JPY", 500, 500),
        ("KRW", 15000, 15000),
        ("ISK", 990, 99000),
        ("UGX", 3700, 370000),
        ("KWD", 1250, 1250),
    ],
)
def test_amounts_in_zero_decimal_and_special_currencies(
    currency: str, ours: int, stripes: int
) -> None:
    assert to_stripe_amount(ours, currency) == stripes
    assert from_stripe_amount(stripes, currency) == ours


def test_amounts_stripe_refuses_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="multiple of 10"):
        to_stripe_amount(1255, "KWD")
    with pytest.raises(MalformedBody, match="whole number"):
        from_stripe_amount(99050, "ISK")
    built, sent, _ = client([OK])
    with pytest.raises(ValueError, match="multiple of 10"):
        built.authorize(request(currency="KWD", amount=1255))
    assert sent == []


def test_a_jpy_authorization_is_sent_in_yen() -> None:
    answer = intent(currency="jpy", amount=500, amount_received=500)
    answer["latest_charge"].update(amount=500, amount_captured=500, currency="jpy")
    built, sent, _ = client([httpx.Response(200, json=answer)])
    result = built.authorize(request(currency="JPY", amount=500))
    assert (result.amount, result.currency, result.amount_captured) == (500, "JPY", 500)
    assert dict(parse_qsl(sent[0].content.decode()))["amount"] == "500"


def test_api_version_is_validated() -> None:
    with pytest.raises(ValueError, match="api_version"):
        StripeDialect(api_version="latest")


def test_should_retry_false_stops_the_call_and_says_why() -> None:
    answer = stripe_error(429, {"type": "rate_limit_error"}, **{"Stripe-Should-Retry": "false"})
    built, sent, slept = client([answer, OK])
    with pytest.raises(RateLimitedError) as raised:
        built.authorize(request())
    assert raised.value.provider_retry is False
    assert raised.value.attempt_log[-1].stop_reason == "provider_no_retry"
    assert (len(sent), slept) == (1, [])


def test_idempotency_error_is_counted_and_logged_as_an_alert(caplog) -> None:
    built, sent, _ = client([stripe_error(400, {"type": "idempotency_error"})])
    with caplog.at_level("ERROR", logger="gateway_client"), pytest.raises(InvalidRequestError):
        built.authorize(request())
    assert len(sent) == 1
    assert built.metrics.get("idempotency_misuse", operation="authorize") == 1
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "idempotency_error" in record.getMessage()
    assert SECRET not in record.getMessage()


def _listing(items: list[dict[str, Any]], *, more: bool) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": items, "has_more": more})


def test_lookup_reads_the_next_page_while_a_page_without_ours_says_more_follow() -> None:
    """Newest first, 100 a page: ours on the second page is found there, after the first
    page's last id; a complete listing without ours is "none" after its last page."""
    theirs = [
        intent(id=f"pi_theirs{n}", metadata={"payment_reference": "pay_other"}) for n in range(3)
    ]
    built, sent, _ = client(
        [_listing(theirs[:2], more=True), _listing([theirs[2], intent()], more=True)]
    )
    (found,) = built.lookup(REFERENCE)
    assert found.payment_reference == REFERENCE
    assert [dict(r.url.params).get("starting_after") for r in sent] == [None, "pi_theirs1"]
    assert all(dict(r.url.params)["limit"] == "100" for r in sent)

    built, sent, _ = client([_listing(theirs[:2], more=True), _listing(theirs[2:], more=False)])
    assert built.lookup(REFERENCE) == []
    assert len(sent) == 2


def test_a_listing_longer_than_the_pages_read_is_never_none() -> None:
    """Past LOOKUP_PAGES pages without ours, the look-up fails as for a garbled answer: an
    incomplete listing never says "absent" (reconciliation would re-create the payment)."""
    theirs = intent(id="pi_theirs", metadata={"payment_reference": "pay_other"})
    built, sent, _ = client([_listing([theirs], more=True)] * (LOOKUP_PAGES + 1))
    with pytest.raises(MalformedResponseError, match="has_more"):
        built.lookup(REFERENCE)
    # Every page once; the last one twice (the client retries a GET it cannot read).
    assert len(sent) == LOOKUP_PAGES + 1
    assert sent[-1].url == sent[-2].url


# -- customer actions (3-D Secure by redirect, docs/adr/0049) ---------------------------------

RETURN = "https://pay.example.com/payments/return/rtok_" + "a" * 43
REDIRECT = {
    "type": "redirect_to_url",
    "redirect_to_url": {
        "url": "https://hooks.stripe.com/3d_secure_2/hosted?x=1",
        "return_url": RETURN,
    },
}


def waiting(next_action: dict[str, Any] | None = None) -> dict[str, Any]:
    """A PaymentIntent held for the shopper, as Stripe documents it: no charge yet."""
    return intent("requires_action", latest_charge=None, next_action=next_action or REDIRECT)


def test_a_return_url_is_sent_and_a_redirect_is_action_required() -> None:
    built, sent, _ = client([httpx.Response(200, json=waiting())])
    action = built.authorize(request(return_url=RETURN))
    assert isinstance(action, ActionRequired)
    assert (action.acquirer_reference, action.url) == (
        intent()["id"],
        REDIRECT["redirect_to_url"]["url"],
    )
    assert dict(parse_qsl(sent[0].content.decode()))["return_url"] == RETURN
    listing = {"object": "list", "data": [waiting()], "has_more": False}
    (found,) = StripeDialect().decode_lookup(_answer(listing), REFERENCE)
    assert found == action


@pytest.mark.parametrize(
    ("document", "return_url"),
    [
        (waiting(), None),  # a redirect nobody asked for
        (
            waiting(
                {"type": "use_stripe_sdk", "use_stripe_sdk": {"type": "three_d_secure_redirect"}}
            ),
            RETURN,
        ),
        (waiting({**REDIRECT, "redirect_to_url": {"url": "javascript:alert(1)"}}), RETURN),
        (waiting({"type": "redirect_to_url"}), RETURN),
    ],
)
def test_any_other_action_is_no_outcome_yet(document, return_url) -> None:
    with pytest.raises(MalformedBody):
        StripeDialect().decode_authorization(_answer(document), request(return_url=return_url))


def test_without_return_url_none_is_sent() -> None:
    built, sent, _ = client([httpx.Response(200, json=intent())])
    built.authorize(request())
    assert "return_url" not in dict(parse_qsl(sent[0].content.decode()))


def test_a_waiting_payment_intent_canceled_is_a_void_never_approved() -> None:
    canceled = intent("canceled", latest_charge=None, next_action=None, canceled_at=1700000000)
    voided = StripeDialect().decode_void(
        _answer(canceled), VoidRequest(intent()["id"], "void-pay_01STRIPE")
    )
    assert (voided.approved, voided.voided) == (False, True)

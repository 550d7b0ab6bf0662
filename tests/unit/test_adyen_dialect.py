"""
The Adyen dialect (gateway_client/adyen.py) without a network: the failure table as a table
test (status, headers, body) -> classification, retry or not, wait, through the real client and
retry loop (httpx.MockTransport stands in for Adyen's network only); every `resultCode` of
Checkout v71; the requests built (and valid against Adyen's OpenAPI description); the decoders
on Adyen's own published examples (tests/data/adyen/, MIT); the 64-character key limit; the
currencies whose minor units differ on Adyen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    ActionDetailsRequest,
    ActionRequired,
    AuthenticationError,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    IdempotencyConflictError,
    InvalidRequestError,
    LookupUnsupported,
    MalformedResponseError,
    Received,
    RefundRequest,
    SandboxDialect,
    UpstreamServerError,
    VoidRequest,
)
from gateway_client._call import Answer
from gateway_client.adyen import (
    AdyenDialect,
    adyen_live_base_url,
    from_adyen_amount,
    to_adyen_amount,
)
from gateway_client.adyen_codes import AUTHORIZATION_RESULTS
from gateway_client.wire import MalformedBody
from payments.acquirer.routing import acquirer_idempotency_key
from tests.support.adyen import validate_exchange
from tests.support.dialects import scripted_client

DATA = Path(__file__).parents[1] / "data" / "adyen" / "checkout"
SPEC = Path(__file__).parents[1] / "support" / "specs" / "adyen" / "CheckoutService-v71.json"
API_KEY = "AQEyhmfxLIXAdyenTestKey"
KEY = "authorize-pay_0123456789abcdef01234567"
REFERENCE = "pay_0123456789abcdef01234567"
DIALECT = AdyenDialect(merchant_account="AcmeECOM", return_url="https://shop.example/return")


def vector(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def request(capture: bool = True, **overrides: Any) -> AuthorizationRequest:
    fields: dict[str, Any] = {
        "amount": 1000,
        "currency": "EUR",
        "payment_method": "spm_M5N7TQ4TG5PFWR50",
        "payment_reference": REFERENCE,
        "idempotency_key": KEY,
        "capture": capture,
    }
    fields.update(overrides)
    return AuthorizationRequest(**fields)


def payment(result: str = "Authorised", **extra: Any) -> dict[str, Any]:
    """Adyen's published `/payments` answer (the SDK's fixture), as ours would be answered."""
    document = vector("payments-success.json")
    document.update({"resultCode": result, "merchantReference": REFERENCE} | extra)
    return document


def service_error(status: int, code: str, error_type: str, **headers: str) -> httpx.Response:
    body = {"status": status, "errorCode": code, "message": "m", "errorType": error_type}
    return httpx.Response(status, json=body, headers=headers)


def client(
    answers: list[httpx.Response], *, honours_keys: bool = True
) -> tuple[AcquirerClient, list[httpx.Request], list[float]]:
    return scripted_client(
        DIALECT,
        answers,
        base_url="https://checkout-test.adyen.com/v71",
        api_key=API_KEY,
        honours_keys=honours_keys,
    )


OK = httpx.Response(200, json=payment(), headers={"pspReference": "8535296650153317"})
HTML_502 = httpx.Response(502, content=b"<html><body>Bad Gateway</body></html>")

# (name, first answer, honours keys, expected class or "approved"/"declined", attempts, wait)
# `wait`: the sleep before the second attempt (backoff with random 0.5 is 0.1 s), None when
# no second attempt was made.
TABLE: list[tuple[str, httpx.Response, bool, Any, int, float | None]] = [
    ("200 Authorised", OK, True, "approved", 1, None),
    (
        "200 Refused: a decline",
        httpx.Response(
            200, json=payment("Refused", refusalReason="Not enough balance", refusalReasonCode="12")
        ),
        True,
        "declined",
        1,
        None,
    ),
    (
        "200 ChallengeShopper: no shopper, a decline",
        httpx.Response(200, json=payment("ChallengeShopper")),
        True,
        "declined",
        1,
        None,
    ),
    (
        "200 Pending: no outcome, ambiguous",
        httpx.Response(200, json=payment("Pending")),
        False,
        MalformedResponseError,
        1,
        None,
    ),
    (
        "429: binds nothing, retried",
        service_error(429, "000", "internal"),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "429 Retry-After 2: retried after it",
        service_error(429, "000", "internal", **{"Retry-After": "2"}),
        True,
        "approved",
        2,
        2.1,
    ),
    (
        "422 704 Transient-Error: the same key again",
        service_error(422, "704", "validation", **{"Transient-Error": "true"}),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "422 704 where keys are not honoured: ambiguous",
        service_error(422, "704", "validation"),
        False,
        IdempotencyConflictError,
        1,
        None,
    ),
    (
        "422 130 validation: permanent",
        httpx.Response(422, json=vector("payments-error-invalid-data-422.json")),
        True,
        InvalidRequestError,
        1,
        None,
    ),
    (
        "400 validation: permanent",
        service_error(400, "702", "validation"),
        True,
        InvalidRequestError,
        1,
        None,
    ),
    (
        "401 security: permanent",
        service_error(401, "000", "security"),
        True,
        AuthenticationError,
        1,
        None,
    ),
    (
        "403 901 security: permanent",
        httpx.Response(403, json=vector("paymentmethods-error-forbidden-403.json")),
        True,
        AuthenticationError,
        1,
        None,
    ),
    (
        "500: ambiguous, retried with the key Adyen keeps",
        service_error(500, "905", "internal"),
        True,
        "approved",
        2,
        0.1,
    ),
    (
        "500 where keys are not honoured: not retried",
        service_error(500, "905", "internal"),
        False,
        UpstreamServerError,
        1,
        None,
    ),
    ("502 HTML: ambiguous, never authorised", HTML_502, False, UpstreamServerError, 1, None),
    (
        "503: ambiguous at Adyen, not 'not applied'",
        service_error(503, "905", "internal"),
        False,
        UpstreamServerError,
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
        assert result.acquirer_reference == "8535296650153317"
    else:
        with pytest.raises(expected) as raised:
            built.authorize(request())
        assert raised.value.attempts == attempts
        assert API_KEY not in str(raised.value)
    assert len(sent) == attempts
    assert {r.headers["Idempotency-Key"] for r in sent} == {KEY}  # one key, every attempt
    assert {r.headers["X-API-Key"] for r in sent} == {API_KEY}
    assert slept == ([] if wait is None else [pytest.approx(wait)])


def test_every_result_code_of_checkout_v71_has_a_meaning() -> None:
    spec = json.loads(SPEC.read_text())
    documented = spec["components"]["schemas"]["PaymentResponse"]["properties"]["resultCode"]
    assert set(AUTHORIZATION_RESULTS) == set(documented["enum"])
    assert len(AUTHORIZATION_RESULTS) == 14


@pytest.mark.parametrize("result", sorted(AUTHORIZATION_RESULTS))
def test_each_result_code_decodes_as_its_meaning(result: str) -> None:
    meaning = AUTHORIZATION_RESULTS[result]
    answer = _answer(200, payment(result))
    if meaning == "unknown":
        with pytest.raises(MalformedBody):
            DIALECT.decode_authorization(answer, request())
        return
    authorization = DIALECT.decode_authorization(answer, request())
    assert authorization.approved is (meaning == "approved")
    if meaning == "shopper":
        assert authorization.decline_code == "shopper_action_required"
    elif meaning == "declined":
        assert authorization.decline_code == result.lower()


def test_a_refusal_names_its_reason() -> None:
    answer = _answer(200, payment("Refused", refusalReason="Not enough balance"))
    assert DIALECT.decode_authorization(answer, request()).decline_code == "not_enough_balance"
    coded = _answer(200, payment("Refused", refusalReasonCode="12"))
    assert DIALECT.decode_authorization(coded, request()).decline_code == "refusal_12"


def test_an_answer_for_another_reference_or_amount_is_ambiguous() -> None:
    for document in (
        payment(merchantReference="pay_other"),
        payment(amount={"currency": "EUR", "value": 999}),
        payment(pspReference=""),
    ):
        with pytest.raises(MalformedBody):
            DIALECT.decode_authorization(_answer(200, document), request())


def test_requests_are_checkout_v71s_and_valid_against_its_description() -> None:
    manual = DIALECT.authorize_request(request(capture=False))
    automatic = DIALECT.authorize_request(request())
    capture = DIALECT.capture_request(
        CaptureRequest("8535296650153317", 700, "capture-op_1", currency="EUR", reference="op_1")
    )
    void = DIALECT.void_request(VoidRequest("8535296650153317", "void-op_2", reference="op_2"))
    refund = DIALECT.refund_request(
        RefundRequest("8535296650153317", "re_3", 300, "refund-re_3", currency="EUR")
    )
    body = json.loads(manual.body or b"")
    assert body["additionalData"] == {"manualCapture": "true"}
    assert body["reference"] == REFERENCE
    # Our spm_<id> is Adyen's stored payment method <id>: the prefix never reaches Adyen.
    assert body["paymentMethod"] == {"type": "scheme", "storedPaymentMethodId": "M5N7TQ4TG5PFWR50"}
    assert json.loads(automatic.body or b"")["captureDelayHours"] == 0
    assert capture.path == "/payments/8535296650153317/captures"
    assert json.loads(capture.body or b"") == {
        "merchantAccount": "AcmeECOM",
        "amount": {"currency": "EUR", "value": 700},
        "reference": "op_1",
    }
    assert void.path == "/payments/8535296650153317/cancels"
    assert refund.path == "/payments/8535296650153317/refunds"
    for wire in (manual, automatic, capture, void, refund):
        validate_exchange(
            {
                "method": "post", "path": "/v71" + wire.path, "body": (wire.body or b"").decode(),
                "headers": {"idempotency-key": "k"}, "api_key": True, "status": 422,
                "answer": vector("payments-error-invalid-data-422.json"),
            }
        )  # fmt: skip


def test_a_capture_or_refund_without_amount_and_currency_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="amount and currency"):
        DIALECT.capture_request(CaptureRequest("8535296650153317", None, "capture-op_1"))
    with pytest.raises(ValueError, match="amount and currency"):
        DIALECT.refund_request(RefundRequest("8535296650153317", "re_1", 100, "refund-re_1"))


def test_modifications_received_are_pending_never_done() -> None:
    published = vector("paymentcapture-success.json")  # Adyen's own example
    capture = CaptureRequest(
        published["paymentPspReference"], 2500, "capture-op_1", currency="EUR",
        reference=published["reference"],
    )  # fmt: skip
    dialect = AdyenDialect(
        merchant_account=published["merchantAccount"], return_url="https://s.example/"
    )
    received = dialect.decode_capture(_answer(201, published), capture)
    assert isinstance(received, Received)
    assert (received.operation, received.acquirer_reference, received.amount) == (
        "capture", published["pspReference"], 2500,
    )  # fmt: skip
    cancel = vector("paymentscancels-success.json")
    void = VoidRequest(cancel["paymentPspReference"], "void-op_2", reference=cancel["reference"])
    assert dialect.decode_void(_answer(201, cancel), void).operation == "void"
    # The answer of `/cancels` by our reference (a call we never make) names no payment: refused.
    unreferenced = vector("paymentscancel-withoutreference-succes.json")
    with pytest.raises(MalformedBody, match="paymentPspReference"):
        dialect.decode_void(_answer(201, unreferenced), void)
    for changed in ({"status": "captured"}, {"paymentPspReference": "OTHER"},
                    {"amount": {"currency": "EUR", "value": 2499}}):  # fmt: skip
        with pytest.raises(MalformedBody):
            dialect.decode_capture(_answer(201, published | changed), capture)


def test_the_client_counts_a_received_capture_as_received() -> None:
    published = vector("paymentcapture-success.json") | {"merchantAccount": "AcmeECOM"}
    built, _, _ = client([httpx.Response(201, json=published)])
    received = built.capture(
        CaptureRequest(published["paymentPspReference"], 2500, "capture-op_1", currency="EUR",
                       reference=published["reference"])
    )  # fmt: skip
    assert isinstance(received, Received)
    assert received.attempt_log[0].outcome == "received"


def test_keys_over_64_characters_are_refused_before_sending_and_ours_fit() -> None:
    built, sent, _ = client([OK])
    with pytest.raises(ValueError, match="64 characters adyen keeps"):
        built.authorize(request(idempotency_key="k" * 65))
    assert sent == []
    longest = acquirer_idempotency_key("pay_" + "f" * 24, "a" * 24, first=False)
    assert len(longest) <= 64
    assert len("refund-re_" + "f" * 24) <= 64


def test_no_look_up_by_reference() -> None:
    built, sent, _ = client([])
    with pytest.raises(LookupUnsupported):
        built.lookup(REFERENCE)
    with pytest.raises(LookupUnsupported):
        built.lookup_refunds("re_1")
    assert sent == []


@pytest.mark.parametrize(
    ("currency", "ours", "adyens"),
    [
        ("EUR", 1000, 1000),
        ("JPY", 500, 500),
        ("KWD", 1234, 1234),
        ("ISK", 500, 50000),
        ("CLP", 700, 70000),
        ("CVE", 300, 3),
        ("IDR", 150000, 1500),
    ],
)
def test_currency_exponents_per_adyen(currency: str, ours: int, adyens: int) -> None:
    assert to_adyen_amount(ours, currency) == adyens
    assert from_adyen_amount(adyens, currency) == ours


def test_amounts_adyen_cannot_carry_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        to_adyen_amount(150, "CVE")  # 1.50 CVE: Adyen has no decimals for it
    with pytest.raises(MalformedBody):
        from_adyen_amount(50001, "ISK")


def test_live_url_and_settings_are_checked() -> None:
    assert adyen_live_base_url("abc123-acme") == (
        "https://abc123-acme-checkout-live.adyenpayments.com/checkout/v71"
    )
    with pytest.raises(ValueError, match="live_url_prefix"):
        adyen_live_base_url("ABC/..")
    with pytest.raises(ValueError, match="merchant_account"):
        AdyenDialect(merchant_account="Acme ECOM", return_url="https://s.example/")
    with pytest.raises(ValueError, match="return_url"):
        AdyenDialect(merchant_account="Acme", return_url="s.example")


def _answer(status: int, document: dict[str, Any]) -> Answer:
    return Answer(status_code=status, headers=httpx.Headers(), body=json.dumps(document).encode())


# -- customer actions (docs/adr/0049): Adyen's own examples ------------------------------------

RETURN = "https://pay.example/payments/return/rtok_" + "A" * 43


def spec_example(name: str) -> dict[str, Any]:
    """One of the examples Adyen's OpenAPI description publishes (`components.examples`)."""
    return json.loads(SPEC.read_text())["components"]["examples"][name]["value"]


def details(**overrides: Any) -> ActionDetailsRequest:
    fields: dict[str, Any] = {
        "payment_reference": REFERENCE,
        "amount": 1000,
        "currency": "EUR",
        "capture": True,
        "redirect_result": "X6XtfGC3!Y...",
        "idempotency_key": "details-" + REFERENCE + "-0123456789abcdef",
    }
    return ActionDetailsRequest(**(fields | overrides))


REDIRECT = spec_example("post-payments-card-3d-secure-redirect-200")


@pytest.mark.parametrize(
    ("name", "document", "return_url", "expected"),
    [
        ("Adyen's 3-D Secure redirect, with our return address", REDIRECT, RETURN, "action"),
        ("the same without a return address: no shopper can act", REDIRECT, None, "declined"),
        (
            "a POST redirect: no plain link to give",
            REDIRECT | {"action": REDIRECT["action"] | {"method": "POST", "data": {"MD": "m"}}},
            RETURN,
            "declined",
        ),
        (
            "a native 3-D Secure 2 action: no link",
            REDIRECT | {"resultCode": "IdentifyShopper", "action": {"type": "threeDS2"}},
            RETURN,
            "declined",
        ),
        (
            "ChallengeShopper with a GET redirect",
            REDIRECT | {"resultCode": "ChallengeShopper"},
            RETURN,
            "action",
        ),
    ],
)
def test_a_shopper_code_with_a_get_redirect_and_a_return_address_is_action_required(
    name: str, document: dict[str, Any], return_url: str | None, expected: str
) -> None:
    decoded = DIALECT.decode_authorization(_answer(200, document), request(return_url=return_url))
    if expected == "action":
        assert isinstance(decoded, ActionRequired), name
        assert decoded.url == REDIRECT["action"]["url"]
        assert decoded.acquirer_reference == "JLCMPCQ8HXSKGK82"
        assert (decoded.amount, decoded.currency) == (1000, "EUR")
    else:
        assert isinstance(decoded, Authorization), name
        assert (decoded.approved, decoded.decline_code) == (False, "shopper_action_required")


def test_the_authorization_sends_the_payments_return_address_else_the_configured_one() -> None:
    wire = DIALECT.authorize_request(request(return_url=RETURN))
    assert json.loads(wire.body or b"")["returnUrl"] == RETURN
    plain = DIALECT.authorize_request(request())
    assert json.loads(plain.body or b"")["returnUrl"] == "https://shop.example/return"


@pytest.mark.parametrize(
    ("name", "document", "approved", "decline_code"),
    [
        ("the SDK's details answer", vector("paymentsdetails-success.json"), True, None),
        (
            "the description's example",
            spec_example("post-payments-details-00.redirect-200"),
            True,
            None,
        ),
        (
            "refused",
            {
                "pspReference": "V4HZ4RBFJGXXGN82",
                "resultCode": "Refused",
                "refusalReason": "3D Not Authenticated",
                "refusalReasonCode": "11",
            },
            False,
            "3d_not_authenticated",
        ),
    ],
)
def test_the_details_answer_is_the_payments_outcome(
    name: str, document: dict[str, Any], approved: bool, decline_code: str | None
) -> None:
    outcome = DIALECT.decode_action_details(_answer(200, document), details())
    assert (outcome.approved, outcome.decline_code) == (approved, decline_code), name
    assert outcome.payment_reference == REFERENCE
    manual = DIALECT.decode_action_details(_answer(200, document), details(capture=False))
    assert manual.captured is (False if approved else None)


def test_a_details_answer_without_a_final_outcome_or_for_another_payment_is_ambiguous() -> None:
    for document in (
        {"pspReference": "V4HZ4RBFJGXXGN82", "resultCode": "RedirectShopper"},
        {"pspReference": "V4HZ4RBFJGXXGN82", "resultCode": "Pending"},
        {
            "pspReference": "V4HZ4RBFJGXXGN82",
            "resultCode": "Authorised",
            "merchantReference": "pay_other",
        },
        {"resultCode": "Authorised"},
    ):
        with pytest.raises(MalformedBody):
            DIALECT.decode_action_details(_answer(200, document), details())


def test_the_details_request_is_checkout_v71s_and_refused_results_are_permanent() -> None:
    wire = DIALECT.action_details_request(details())
    assert (wire.method, wire.path) == ("POST", "/payments/details")
    assert json.loads(wire.body or b"") == spec_example("post-payments-details-00.redirect")
    validate_exchange(
        {
            "method": "post", "path": "/v71/payments/details", "body": (wire.body or b"").decode(),
            "headers": {"idempotency-key": "k"}, "api_key": True, "status": 200,
            "answer": vector("paymentsdetails-success.json"),
        }
    )  # fmt: skip
    refused = vector("paymentsdetails-error-invalid-data-422.json")
    built, sent, _ = client([httpx.Response(422, json=refused)])
    with pytest.raises(InvalidRequestError):
        built.action_details(details())
    assert len(sent) == 1
    assert sent[0].headers["Idempotency-Key"] == details().idempotency_key
    assert "X6XtfGC3" not in repr(details())


def test_a_dialect_with_a_look_up_finishes_no_action_on_a_redirect_result() -> None:
    built, sent, _ = scripted_client(
        SandboxDialect(), [], base_url="https://sandbox.example", api_key="k"
    )
    with pytest.raises(ValueError, match="no customer action"):
        built.action_details(details())
    assert sent == []

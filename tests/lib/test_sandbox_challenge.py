"""3-D Secure at the sandbox acquirer, without sockets (ADR 0049): ``tok_3ds_challenge`` with a
``return_url`` answers ``requires_action`` with the challenge page's address; the page's
Approve and Deny record the outcome and send the shopper to the return address (303); the
look-up shows the charge as it stands; a void of a waiting charge cancels it and closes the
challenge; without a ``return_url`` the token is declined ``shopper_action_required``. And
the gateway client's sandbox dialect decodes each of these answers into its typed value."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway_client import ActionRequired, Authorization, AuthorizationRequest, VoidRequest
from gateway_client._call import Answer
from gateway_client.sandbox_dialect import SandboxDialect
from gateway_client.wire import MalformedBody
from sandbox_acquirer.app import Request, Response, SandboxApp
from sandbox_acquirer.store import SandboxStore
from tests.lib.test_sandbox_lifecycle import SETTINGS, START, body_of, get, post, void
from tests.support.fake_time import FakeClock, FakeWait

API_KEY = "sk_unit"
RETURN = "https://shop.example/orders/7/back?x=1"
HOST = "127.0.0.1:8090"


@pytest.fixture
def app() -> SandboxApp:
    clock = FakeClock(START)
    return SandboxApp(
        store=SandboxStore(clock=clock),
        api_keys=(API_KEY,),
        scenario_settings=SETTINGS,
        wait=FakeWait(clock),
    )


def charge_body(*, return_url: str | None = RETURN, capture: bool | None = None) -> dict:
    body: dict[str, Any] = {
        "amount": 2500,
        "currency": "EUR",
        "payment_method": "tok_3ds_challenge",
        "reference": "pay_3ds",
    }
    if capture is not None:
        body["capture"] = capture
    if return_url is not None:
        body["return_url"] = return_url
    return body


def create(app: SandboxApp, **options: Any) -> Response:
    body = json.dumps(charge_body(**options)).encode()
    headers = {
        "authorization": f"Bearer {API_KEY}",
        "content-type": "application/json",
        "idempotency-key": "authorize-pay_3ds",
        "host": HOST,
    }
    return app.handle(Request(method="POST", path="/charges", headers=headers, body=body))


def shopper(app: SandboxApp, method: str, path: str, body: bytes = b"") -> Response:
    """The shopper's browser: no API key."""
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return app.handle(Request(method=method, path=path, headers=headers, body=body))


def listed(app: SandboxApp) -> dict:
    (charge,) = body_of(get(app, "/charges", "reference=pay_3ds"))["data"]
    return charge


def decoded(answer: Response, *, return_url: str | None = RETURN) -> Authorization | ActionRequired:
    request = AuthorizationRequest(
        amount=2500,
        currency="EUR",
        payment_method="tok_3ds_challenge",
        payment_reference="pay_3ds",
        idempotency_key="authorize-pay_3ds",
        return_url=return_url,
    )
    wire = Answer(answer.status, httpx.Headers(dict(answer.headers)), answer.body)
    return SandboxDialect().decode_authorization(wire, request)


def test_the_challenge_token_holds_the_charge_for_the_shopper(app):
    answer = create(app)
    charge = body_of(answer)
    assert answer.status == 201
    assert charge["status"] == "requires_action"
    assert charge["next_action"] == {
        "type": "redirect_to_url",
        "url": f"http://{HOST}/challenge/{charge['id']}",
    }
    action = decoded(answer)
    assert isinstance(action, ActionRequired)
    assert (action.acquirer_reference, action.url) == (charge["id"], charge["next_action"]["url"])
    assert listed(app)["status"] == "requires_action"


def test_the_page_offers_approve_and_deny(app):
    charge = body_of(create(app))
    page = shopper(app, "GET", f"/challenge/{charge['id']}")
    assert page.status == 200
    assert page.content_type.startswith("text/html")
    assert b'value="approve"' in page.body and b'value="deny"' in page.body


@pytest.mark.parametrize("capture", [None, False])
def test_approve_records_the_approval_and_sends_the_shopper_back(app, capture):
    charge = body_of(create(app, capture=capture))
    answer = shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=approve")
    assert answer.status == 303
    assert dict(answer.headers)["Location"] == RETURN
    now = listed(app)
    assert (now["status"], now["captured"]) == ("approved", capture is None)
    found = SandboxDialect().decode_lookup(
        Answer(200, httpx.Headers(), json.dumps({"data": [now]}).encode()), "pay_3ds"
    )
    assert isinstance(found[0], Authorization) and found[0].approved


def test_deny_declines_authentication_failed(app):
    charge = body_of(create(app))
    answer = shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=deny")
    assert answer.status == 303
    now = listed(app)
    assert (now["status"], now["decline_code"]) == ("declined", "authentication_failed")


def test_a_second_answer_is_refused_and_changes_nothing(app):
    charge = body_of(create(app))
    shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=approve")
    again = shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=deny")
    assert again.status == 409
    assert b"closed" in again.body
    assert listed(app)["status"] == "approved"


def test_a_void_cancels_a_waiting_charge_and_closes_its_challenge(app):
    charge = body_of(create(app))
    voided = void(app, charge["id"], key=f"void-{charge['id']}")
    assert voided.status == 200
    assert (body_of(voided)["status"], body_of(voided)["voided"]) == ("canceled", True)
    wire = Answer(200, httpx.Headers(), voided.body)
    request = VoidRequest(acquirer_reference=charge["id"], idempotency_key="void-x")
    decoded_void = SandboxDialect().decode_void(wire, request)
    assert (decoded_void.approved, decoded_void.voided) == (False, True)
    late = shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=approve")
    assert late.status == 409
    assert listed(app)["status"] == "canceled"


def test_a_waiting_charge_cannot_be_captured(app):
    charge = body_of(create(app, capture=False))
    refused = post(app, f"/charges/{charge['id']}/capture", {}, key="cap-3ds")
    assert refused.status == 422
    assert body_of(refused)["code"] == "charge_requires_action"


def test_without_a_return_url_the_challenge_is_a_decline(app):
    answer = create(app, return_url=None)
    charge = body_of(answer)
    assert (charge["status"], charge["decline_code"]) == ("declined", "shopper_action_required")
    authorization = decoded(answer, return_url=None)
    assert isinstance(authorization, Authorization) and not authorization.approved


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/challenge/ch_unknown", b"outcome=approve", 404),
        ("/challenge/ch_unknown", b"", 404),
    ],
)
def test_an_unknown_charge_or_answer_is_a_clear_refusal(app, path, body, status):
    assert shopper(app, "POST" if body else "GET", path, body).status == status


def test_a_malformed_answer_is_refused(app):
    charge = body_of(create(app))
    assert shopper(app, "POST", f"/challenge/{charge['id']}", b"outcome=maybe").status == 400
    assert listed(app)["status"] == "requires_action"


@pytest.mark.parametrize("return_url", ["ftp://x", "", "x" * 3000, 12])
def test_a_bad_return_url_is_a_400(app, return_url):
    assert create(app, return_url=return_url).status == 400


def test_an_action_to_a_request_without_return_url_is_malformed():
    """The client refuses a challenge its request could not have asked for."""
    document = {
        "id": "ch_1", "status": "requires_action", "decline_code": None, "amount": 2500,
        "currency": "EUR", "reference": "pay_3ds", "created_at": "2026-11-29T17:00:00Z",
        "next_action": {"type": "redirect_to_url", "url": "http://127.0.0.1/challenge/ch_1"},
    }  # fmt: skip
    answer = Response(201, json.dumps(document).encode())
    with pytest.raises(MalformedBody):
        decoded(answer, return_url=None)
    document["next_action"] = {"type": "redirect_to_url", "url": "javascript:alert(1)"}
    with pytest.raises(MalformedBody):
        decoded(Response(201, json.dumps(document).encode()))

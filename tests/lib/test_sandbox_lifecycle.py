"""Manual capture, void and refunds at the sandbox acquirer, without sockets: the acquirer's
rules (404/422), idempotent replays per key, every token fault on every operation, the
conditions' endpoint labels, the stats, the settlement listings and the memory bounds.
Injected clock and fake wait, so delays are exact."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox_acquirer.app import Request, Response, SandboxApp
from sandbox_acquirer.models import Charge, ChargeRequest, InvalidRequest, OperationRefused
from sandbox_acquirer.scenarios import ScenarioSettings, resolve_scenario, resolve_token
from sandbox_acquirer.store import SandboxStore
from tests.support.fake_time import FakeClock, FakeWait

START = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)
API_KEY = "sk_unit"
OTHER_API_KEY = "sk_unit_other"
SETTINGS = ScenarioSettings(hang_seconds=2.0, trickle_seconds_per_byte=1.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def wait(clock: FakeClock) -> FakeWait:
    return FakeWait(clock)


def make_app(clock: FakeClock, wait: Any, **store_options: Any) -> SandboxApp:
    return SandboxApp(
        store=SandboxStore(clock=clock, **store_options),
        api_keys=(API_KEY, OTHER_API_KEY),
        scenario_settings=SETTINGS,
        wait=wait,
    )


@pytest.fixture
def app(clock: FakeClock, wait: FakeWait) -> SandboxApp:
    return make_app(clock, wait)


def post(
    app: SandboxApp,
    path: str,
    body: Any = None,
    key: str | None = "key",
    api_key: str = API_KEY,
    raw: bytes | None = None,
) -> Response:
    headers = {"authorization": f"Bearer {api_key}", "content-type": "application/json"}
    if key is not None:
        headers["idempotency-key"] = key
    if raw is None:
        raw = b"" if body is None else json.dumps(body).encode()
    return app.handle(Request(method="POST", path=path, headers=headers, body=raw))


def get(app: SandboxApp, path: str, query: str = "", api_key: str = API_KEY) -> Response:
    headers = {"authorization": f"Bearer {api_key}"}
    return app.handle(Request(method="GET", path=path, query=query, headers=headers))


def authorize(
    app: SandboxApp,
    token: str = "tok_visa",
    *,
    capture: bool | None = False,
    amount: int = 10_000,
    reference: str = "pay_1",
    key: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "amount": amount,
        "currency": "EUR",
        "payment_method": token,
        "reference": reference,
    }
    if capture is not None:
        body["capture"] = capture
    answer = post(app, "/charges", body, key=key or f"authorize-{reference}-{token}")
    assert answer.status == 201, answer.body
    return body_of(answer)


def capture(app: SandboxApp, charge_id: str, key: str = "cap-1", **body: Any) -> Response:
    return post(app, f"/charges/{charge_id}/capture", body, key=key)


def void(app: SandboxApp, charge_id: str, key: str = "void-1") -> Response:
    return post(app, f"/charges/{charge_id}/void", {}, key=key)


def refund(
    app: SandboxApp, charge_id: str, key: str = "re-1", reference: str = "re_1", **extra: Any
) -> Response:
    return post(app, "/refunds", {"charge": charge_id, "reference": reference, **extra}, key=key)


def body_of(response: Response) -> Any:
    return json.loads(response.body)


def header(response: Response, name: str) -> str | None:
    for key, value in response.headers:
        if key.lower() == name.lower():
            return value
    return None


def assert_problem(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, response.body
    problem = body_of(response)
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["type"].endswith("/" + code)
    return problem


def charge_state(app: SandboxApp, reference: str = "pay_1") -> dict[str, Any]:
    (charge,) = body_of(get(app, "/charges", f"reference={reference}"))["data"]
    return charge


def stats(app: SandboxApp) -> dict[str, Any]:
    return body_of(app.handle(Request(method="GET", path="/_sandbox/stats")))


# -- POST /charges with capture ---------------------------------------------------------


def test_a_body_without_capture_gets_the_same_bytes_as_before() -> None:
    """The 201 of a body without ``capture`` is the original seven fields, in order."""
    charge = Charge.record(
        id="ch_x",
        status="approved",
        decline_code=None,
        request=ChargeRequest(1050, "EUR", "tok_visa", "order-1"),
        created_at=START,
    )
    assert json.dumps(charge.to_json(lifecycle=False), separators=(",", ":")) == (
        '{"id":"ch_x","status":"approved","decline_code":null,"amount":1050,'
        '"currency":"EUR","reference":"order-1","created_at":"2026-11-29T17:00:00Z"}'
    )
    assert ChargeRequest(1050, "EUR", "tok_visa", "order-1").as_dict() == {
        "amount": 1050,
        "currency": "EUR",
        "payment_method": "tok_visa",
        "reference": "order-1",
    }


def test_legacy_charge_answer_has_no_capture_fields_but_the_lookup_has(app: SandboxApp) -> None:
    charge = authorize(app, capture=None)
    assert "captured" not in charge
    state = charge_state(app)
    assert state["captured"] is True
    assert state["amount_captured"] == 10_000
    assert state["captured_at"] == "2026-11-29T17:00:00Z"


def test_capture_false_authorizes_only(app: SandboxApp) -> None:
    charge = authorize(app, capture=False)
    assert charge["status"] == "approved"
    assert (charge["captured"], charge["amount_captured"], charge["voided"]) == (False, 0, False)
    assert charge["amount_refunded"] == 0
    assert charge["captured_at"] is None and charge["voided_at"] is None


def test_capture_true_given_explicitly_answers_the_capture_state(app: SandboxApp) -> None:
    charge = authorize(app, capture=True)
    assert (charge["captured"], charge["amount_captured"]) == (True, 10_000)


def test_declined_charge_is_never_captured(app: SandboxApp) -> None:
    charge = authorize(app, "tok_decline", capture=True)
    assert (charge["status"], charge["captured"], charge["amount_captured"]) == (
        "declined",
        False,
        0,
    )


@pytest.mark.parametrize("value", [None, "false", 0, 1])
def test_capture_must_be_a_boolean(app: SandboxApp, value: Any) -> None:
    body = {"amount": 1, "currency": "EUR", "payment_method": "tok_visa", "reference": "r"}
    assert_problem(post(app, "/charges", {**body, "capture": value}), 400, "invalid_request")


def test_capture_field_is_part_of_the_fingerprint(app: SandboxApp) -> None:
    """Omitting ``capture`` and sending ``capture: false`` under one key are two requests."""
    authorize(app, capture=None, key="same")
    body = {"amount": 10_000, "currency": "EUR", "payment_method": "tok_visa"}
    answer = post(app, "/charges", {**body, "reference": "pay_1", "capture": False}, key="same")
    assert_problem(answer, 422, "idempotency_key_reused")


# -- capture ----------------------------------------------------------------------------


def test_capture_of_the_whole_amount(app: SandboxApp, clock: FakeClock) -> None:
    charge = authorize(app)
    clock.advance(5)
    answer = capture(app, charge["id"])
    assert answer.status == 200
    captured = body_of(answer)
    assert captured["id"] == charge["id"]
    assert (captured["captured"], captured["amount_captured"]) == (True, 10_000)
    assert captured["captured_at"] == "2026-11-29T17:00:05Z"
    assert charge_state(app) == captured


def test_partial_capture_releases_the_rest(app: SandboxApp) -> None:
    charge = authorize(app)
    captured = body_of(capture(app, charge["id"], amount=4000))
    assert (captured["amount"], captured["amount_captured"]) == (10_000, 4000)
    assert_problem(
        capture(app, charge["id"], key="cap-2", amount=1000), 422, "charge_already_captured"
    )


def test_an_empty_capture_body_without_content_type_is_the_whole_amount(app: SandboxApp) -> None:
    charge = authorize(app)
    headers = {"authorization": f"Bearer {API_KEY}", "idempotency-key": "cap-empty"}
    answer = app.handle(
        Request(method="POST", path=f"/charges/{charge['id']}/capture", headers=headers)
    )
    assert body_of(answer)["amount_captured"] == 10_000


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"amount": 0}, 400, "invalid_request"),
        ({"amount": -1}, 400, "invalid_request"),
        ({"amount": 1.5}, 400, "invalid_request"),
        ({"amount": True}, 400, "invalid_request"),
        ({"amount": None}, 400, "invalid_request"),
        ({"amount": 5, "currency": "EUR"}, 400, "invalid_request"),
        ({"amount": 10_001}, 422, "amount_exceeds_capturable"),
    ],
)
def test_capture_bodies_the_acquirer_refuses(
    app: SandboxApp, body: dict[str, Any], status: int, code: str
) -> None:
    charge = authorize(app)
    assert_problem(capture(app, charge["id"], **body), status, code)
    assert charge_state(app)["captured"] is False
    # Nothing was stored: the same key captures once the body is right.
    assert capture(app, charge["id"]).status == 200


def test_capture_rules(app: SandboxApp) -> None:
    automatic = authorize(app, capture=None, reference="pay_auto")
    assert_problem(capture(app, automatic["id"]), 422, "charge_already_captured")
    declined = authorize(app, "tok_decline", reference="pay_declined")
    assert_problem(capture(app, declined["id"]), 422, "charge_declined")
    voided = authorize(app, reference="pay_voided")
    assert void(app, voided["id"]).status == 200
    assert_problem(capture(app, voided["id"]), 422, "charge_already_voided")
    assert_problem(capture(app, "ch_unknown"), 404, "charge_not_found")


def test_another_accounts_charge_is_not_found(app: SandboxApp) -> None:
    charge = authorize(app)
    answer = post(app, f"/charges/{charge['id']}/capture", {}, api_key=OTHER_API_KEY)
    assert_problem(answer, 404, "charge_not_found")
    answer = post(
        app, "/refunds", {"charge": charge["id"], "reference": "r"}, api_key=OTHER_API_KEY
    )
    assert_problem(answer, 404, "charge_not_found")


def test_every_new_post_needs_an_idempotency_key(app: SandboxApp) -> None:
    charge = authorize(app)
    for path, body in [
        (f"/charges/{charge['id']}/capture", {}),
        (f"/charges/{charge['id']}/void", {}),
        ("/refunds", {"charge": charge["id"], "reference": "r"}),
    ]:
        problem = assert_problem(post(app, path, body, key=None), 400, "invalid_request")
        assert problem["title"] == "Idempotency-Key is missing"
    assert charge_state(app)["captured"] is False


def test_non_json_body_is_415(app: SandboxApp) -> None:
    charge = authorize(app)
    headers = {
        "authorization": f"Bearer {API_KEY}",
        "idempotency-key": "k",
        "content-type": "text/plain",
    }
    answer = app.handle(
        Request(method="POST", path=f"/charges/{charge['id']}/capture", headers=headers, body=b"{}")
    )
    assert_problem(answer, 415, "unsupported_media_type")


def test_capture_replays_per_key(app: SandboxApp) -> None:
    charge = authorize(app)
    first = capture(app, charge["id"], amount=3000)
    again = capture(app, charge["id"], amount=3000)
    assert again.status == 200 and again.body == first.body
    assert header(again, "Idempotent-Replayed") == "true"
    assert_problem(capture(app, charge["id"], amount=2000), 422, "idempotency_key_reused")
    assert stats(app)["captures_total"] == 1


def test_the_same_key_on_another_charge_or_route_is_reused(app: SandboxApp) -> None:
    one = authorize(app, reference="pay_1")
    two = authorize(app, reference="pay_2")
    assert capture(app, one["id"], key="k").status == 200
    assert_problem(capture(app, two["id"], key="k"), 422, "idempotency_key_reused")
    assert_problem(void(app, one["id"], key="k"), 422, "idempotency_key_reused")
    assert_problem(refund(app, one["id"], key="k"), 422, "idempotency_key_reused")


def test_keys_are_scoped_per_api_key(app: SandboxApp) -> None:
    mine = authorize(app)
    body = {"amount": 500, "currency": "EUR", "payment_method": "tok_visa", "reference": "x"}
    theirs = body_of(
        post(app, "/charges", {**body, "capture": False}, key="a", api_key=OTHER_API_KEY)
    )
    assert capture(app, mine["id"], key="shared").status == 200
    other = post(app, f"/charges/{theirs['id']}/capture", {}, key="shared", api_key=OTHER_API_KEY)
    assert other.status == 200
    assert header(other, "Idempotent-Replayed") is None


def test_a_capture_in_flight_answers_409_for_the_same_key(clock: FakeClock) -> None:
    """While the first capture holds its key (capture_slow_), the same key gets 409."""
    answers: list[Response] = []
    app_ref: list[SandboxApp] = []

    def nested_wait(seconds: float) -> bool:
        answers.append(capture(app_ref[0], charge["id"]))
        return False

    app = make_app(clock, nested_wait)
    app_ref.append(app)
    charge = authorize(app, "tok_capture_slow_1000")
    first = capture(app, charge["id"])
    assert first.status == 200
    problem = assert_problem(answers[0], 409, "idempotency_key_in_use")
    assert problem["status"] == 409 and header(answers[0], "Retry-After") == "1"


# -- void -------------------------------------------------------------------------------


def test_void_releases_an_authorization(app: SandboxApp, clock: FakeClock) -> None:
    charge = authorize(app)
    clock.advance(3)
    voided = body_of(void(app, charge["id"]))
    assert (voided["voided"], voided["captured"], voided["amount_captured"]) == (True, False, 0)
    assert voided["voided_at"] == "2026-11-29T17:00:03Z"
    assert charge_state(app)["voided"] is True
    again = void(app, charge["id"])
    assert header(again, "Idempotent-Replayed") == "true" and body_of(again) == voided


def test_void_rules(app: SandboxApp) -> None:
    charge = authorize(app)
    assert void(app, charge["id"]).status == 200
    assert_problem(void(app, charge["id"], key="void-2"), 422, "charge_already_voided")
    captured = authorize(app, capture=None, reference="pay_2")
    assert_problem(void(app, captured["id"], key="void-c"), 422, "charge_already_captured")
    declined = authorize(app, "tok_decline", reference="pay_3")
    assert_problem(void(app, declined["id"], key="void-d"), 422, "charge_declined")
    assert_problem(
        post(app, f"/charges/{charge['id']}/void", {"amount": 1}), 400, "invalid_request"
    )
    assert_problem(void(app, "ch_nope", key="void-n"), 404, "charge_not_found")


# -- refunds ----------------------------------------------------------------------------


def test_refund_of_part_then_the_rest(app: SandboxApp) -> None:
    charge = authorize(app, capture=None)
    first = refund(app, charge["id"], amount=2500)
    assert first.status == 201
    body = body_of(first)
    assert body["id"].startswith("re_") and len(body["id"]) == 27
    assert {k: body[k] for k in ("object", "charge", "amount", "currency", "reference")} == {
        "object": "refund",
        "charge": charge["id"],
        "amount": 2500,
        "currency": "EUR",
        "reference": "re_1",
    }
    assert (body["status"], body["failure_code"]) == ("succeeded", None)
    rest = body_of(refund(app, charge["id"], key="re-2", reference="re_2"))
    assert rest["amount"] == 7500
    assert charge_state(app)["amount_refunded"] == 10_000
    assert_problem(
        refund(app, charge["id"], key="re-3", reference="re_3"), 422, "charge_already_refunded"
    )


def test_refund_rules(app: SandboxApp) -> None:
    charge = authorize(app)
    assert_problem(refund(app, charge["id"]), 422, "charge_not_captured")
    capture(app, charge["id"], amount=6000)
    assert_problem(refund(app, charge["id"], amount=6001), 422, "amount_exceeds_refundable")
    assert refund(app, charge["id"], amount=6000).status == 201
    assert_problem(
        refund(app, charge["id"], key="re-2", amount=1), 422, "amount_exceeds_refundable"
    )
    voided = authorize(app, reference="pay_v")
    void(app, voided["id"], key="void-v")
    assert_problem(refund(app, voided["id"], key="re-v"), 422, "charge_already_voided")
    declined = authorize(app, "tok_decline", reference="pay_d")
    assert_problem(refund(app, declined["id"], key="re-d"), 422, "charge_declined")
    assert_problem(refund(app, "ch_nope", key="re-n"), 404, "charge_not_found")


@pytest.mark.parametrize(
    "body",
    [
        {"reference": "r"},
        {"charge": "ch_x"},
        {"charge": "", "reference": "r"},
        {"charge": "ch_x", "reference": "r", "amount": 0},
        {"charge": "ch_x", "reference": "r", "amount": "5"},
        {"charge": "ch_x", "reference": "r", "reason": "duplicate"},
        {"charge": "ch_x", "reference": "r" * 256},
    ],
)
def test_invalid_refund_bodies_are_400(app: SandboxApp, body: dict[str, Any]) -> None:
    assert_problem(post(app, "/refunds", body), 400, "invalid_request")


def test_refund_replays_and_look_up_by_reference(app: SandboxApp) -> None:
    charge = authorize(app, capture=None)
    first = refund(app, charge["id"], amount=100, reference="re_ours")
    again = refund(app, charge["id"], amount=100, reference="re_ours")
    assert again.body == first.body and header(again, "Idempotent-Replayed") == "true"
    assert_problem(
        refund(app, charge["id"], amount=200, reference="re_ours"), 422, "idempotency_key_reused"
    )
    listed = body_of(get(app, "/refunds", "reference=re_ours"))
    assert listed == {"data": [body_of(first)]}
    assert body_of(get(app, "/refunds", "reference=re_ours", api_key=OTHER_API_KEY)) == {"data": []}
    assert_problem(get(app, "/refunds"), 400, "invalid_request")
    assert stats(app)["refunds_total"] == 1
    assert charge_state(app)["amount_refunded"] == 100


def test_refund_decline_token_records_a_failed_refund(app: SandboxApp) -> None:
    charge = authorize(app, "tok_refund_insufficient_funds", capture=None)
    answer = refund(app, charge["id"], amount=300)
    assert answer.status == 201
    assert (body_of(answer)["status"], body_of(answer)["failure_code"]) == (
        "failed",
        "insufficient_funds",
    )
    assert charge_state(app)["amount_refunded"] == 0
    assert stats(app)["refunds_total"] == 1


def test_refund_lookup_lag(app: SandboxApp, clock: FakeClock) -> None:
    charge = authorize(app, "tok_refund_lookup_lag_5", capture=None)
    refund(app, charge["id"], reference="re_lag")
    assert body_of(get(app, "/refunds", "reference=re_lag"))["data"] == []
    clock.advance(5)
    assert len(body_of(get(app, "/refunds", "reference=re_lag"))["data"]) == 1


def concurrently(call: Any, arguments: list[Any]) -> list[Response]:
    """``call(argument)`` for every argument, each in its own thread, released together."""
    barrier = threading.Barrier(len(arguments))
    answers: list[Response] = []

    def one(argument: Any) -> None:
        barrier.wait()
        answers.append(call(argument))

    threads = [threading.Thread(target=one, args=(argument,)) for argument in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_concurrent_refunds_never_exceed_the_captured_amount(clock: FakeClock) -> None:
    """Ten threads refund 2000 of a captured 10000 at once: exactly five succeed."""
    app = make_app(clock, lambda seconds: False)
    charge = authorize(app, capture=None)
    answers = concurrently(
        lambda n: refund(app, charge["id"], key=f"re-{n}", reference=f"re_{n}", amount=2000),
        list(range(10)),
    )
    assert sorted(answer.status for answer in answers) == [201] * 5 + [422] * 5
    assert {body_of(a)["code"] for a in answers if a.status == 422} == {"amount_exceeds_refundable"}
    assert charge_state(app)["amount_refunded"] == 10_000
    assert stats(app)["refunds_by_charge_reference"] == {"pay_1": 5}


def test_concurrent_captures_with_two_keys_capture_once(clock: FakeClock) -> None:
    app = make_app(clock, lambda seconds: False)
    charge = authorize(app)
    answers = concurrently(lambda key: capture(app, charge["id"], key=key), ["a", "b"])
    assert sorted(answer.status for answer in answers) == [200, 422]
    assert stats(app)["captures_by_charge_reference"] == {"pay_1": 1}


def test_capture_racing_void_has_one_winner(clock: FakeClock) -> None:
    app = make_app(clock, lambda seconds: False)
    charge = authorize(app)
    answers = concurrently(
        lambda name: capture(app, charge["id"]) if name == "capture" else void(app, charge["id"]),
        ["capture", "void"],
    )
    assert sorted(answer.status for answer in answers) == [200, 422]
    counters = stats(app)
    assert counters["captures_total"] + counters["voids_total"] == 1


# -- faults on each operation --------------------------------------------------------------

OPERATIONS = ["capture", "void", "refund"]


def run(app: SandboxApp, operation: str, charge_id: str, key: str = "op-1") -> Response:
    if operation == "capture":
        return capture(app, charge_id, key=key)
    if operation == "void":
        return void(app, charge_id, key=key)
    return refund(app, charge_id, key=key)


def operation_charge(app: SandboxApp, operation: str, fault: str, auth: str = "") -> dict[str, Any]:
    prefix = f"tok_{auth}__" if auth else "tok_"
    return authorize(
        app, f"{prefix}{operation}_{fault}", capture=None if operation == "refund" else False
    )


def recorded(app: SandboxApp, operation: str) -> int:
    return stats(app)[
        {"capture": "captures", "void": "voids", "refund": "refunds"}[operation] + "_total"
    ]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 401, 403, 404, 409, 422, 400])
def test_fail_status_sequence_on_each_operation(
    app: SandboxApp, operation: str, status: int
) -> None:
    charge = operation_charge(app, operation, f"fail_{status}_2")
    for _ in range(2):
        answer = run(app, operation, charge["id"])
        assert answer.status == status
        assert recorded(app, operation) == 0
    assert run(app, operation, charge["id"]).status in (200, 201)
    assert recorded(app, operation) == 1
    assert stats(app)["faults_injected"] == {f"tok_{operation}_fail": 2}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_timeout_after_commit_on_each_operation(
    app: SandboxApp, wait: FakeWait, operation: str
) -> None:
    charge = operation_charge(app, operation, "timeout_after_commit")
    assert wait.calls == []  # the authorization itself does not hang
    first = run(app, operation, charge["id"])
    assert wait.calls == [2.0]
    assert recorded(app, operation) == 1
    replay = run(app, operation, charge["id"])
    assert replay.body == first.body and header(replay, "Idempotent-Replayed") == "true"
    assert wait.calls == [2.0]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_500_after_commit_on_each_operation(app: SandboxApp, operation: str) -> None:
    charge = operation_charge(app, operation, "500_after_commit")
    assert_problem(run(app, operation, charge["id"]), 500, "api_error")
    assert recorded(app, operation) == 1
    replay = run(app, operation, charge["id"])
    assert replay.status in (200, 201) and header(replay, "Idempotent-Replayed") == "true"
    assert stats(app)["faults_injected"] == {f"tok_{operation}_500_after_commit": 1}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("kind", ["reset", "close"])
def test_connection_drops_after_commit_on_each_operation(
    app: SandboxApp, operation: str, kind: str
) -> None:
    charge = operation_charge(app, operation, f"{kind}_after_commit")
    assert run(app, operation, charge["id"]).action == kind
    assert recorded(app, operation) == 1
    assert header(run(app, operation, charge["id"]), "Idempotent-Replayed") == "true"


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("kind", ["reset", "close"])
def test_connection_drops_before_commit_on_each_operation(
    app: SandboxApp, operation: str, kind: str
) -> None:
    charge = operation_charge(app, operation, f"{kind}_before_commit")
    for _ in range(3):
        assert run(app, operation, charge["id"]).action == kind
    assert recorded(app, operation) == 0


@pytest.mark.parametrize("operation", OPERATIONS)
def test_trickle_slow_and_ratelimit_on_each_operation(
    app: SandboxApp, wait: FakeWait, operation: str
) -> None:
    trickled = operation_charge(app, operation, "trickle_250")
    assert run(app, operation, trickled["id"], key="t").trickle_seconds_per_byte == 0.25
    slow = authorize(
        app,
        f"tok_{operation}_slow_1500",
        capture=None if operation == "refund" else False,
        reference="pay_slow",
    )
    run(app, operation, slow["id"], key="s")
    assert wait.calls == [1.5]
    limited = authorize(
        app,
        f"tok_{operation}_ratelimit_date_7",
        capture=None if operation == "refund" else False,
        reference="pay_rl",
    )
    answer = run(app, operation, limited["id"], key="r")
    assert answer.status == 429
    assert header(answer, "Retry-After") == "Sun, 29 Nov 2026 17:00:09 GMT"
    assert run(app, operation, limited["id"], key="r").status in (200, 201)


def test_an_authorization_fault_does_not_reach_the_capture(app: SandboxApp, wait: FakeWait) -> None:
    """A tok_timeout_after_commit charge hangs on its authorization only."""
    charge = authorize(app, "tok_timeout_after_commit")
    assert wait.calls == [2.0]
    assert capture(app, charge["id"]).status == 200
    assert wait.calls == [2.0]


def test_authorization_and_operation_faults_combine(app: SandboxApp) -> None:
    body = {"amount": 10, "currency": "EUR", "reference": "pay_c", "capture": False}
    token = "tok_fail_503_1__capture_500_after_commit__void_reset_after_commit"
    assert post(app, "/charges", {**body, "payment_method": token}, key="a").status == 503
    charge = body_of(post(app, "/charges", {**body, "payment_method": token}, key="a"))
    assert capture(app, charge["id"]).status == 500


@pytest.mark.parametrize(
    "token",
    [
        "tok_capture_timout_after_commit",
        "tok_capture_decline",
        "tok_void_lookup_lag_3",
        "tok_capture_fail_418_1",
        "tok_capture_visa__capture_fail_503_1",
    ],
)
def test_malformed_operation_segments_are_400(token: str) -> None:
    with pytest.raises(InvalidRequest):
        resolve_token(token, SETTINGS)


def test_tokens_without_operation_segments_resolve_as_before() -> None:
    for token in ["tok_visa", "tok_fail_503_2", "tok_slow_10", "tok_capturex", "tok_anything"]:
        assert resolve_token(token, SETTINGS).operations == {}
        assert resolve_token(token, SETTINGS).authorization == resolve_scenario(token, SETTINGS)
    with pytest.raises(InvalidRequest):
        resolve_token("tok_fail__1", SETTINGS)


# -- conditions per endpoint ----------------------------------------------------------------


def test_outage_on_captures_only(app: SandboxApp) -> None:
    charge = authorize(app)
    setting = {"duration_seconds": 60, "failure": 503, "endpoints": ["POST /charges/{id}/capture"]}
    post(app, "/_sandbox/conditions/outage", setting, key=None)
    assert_problem(capture(app, charge["id"]), 503, "service_unavailable")
    assert authorize(app, reference="pay_2")["status"] == "approved"
    assert refund(app, charge["id"]).status == 422  # not captured: the refund endpoint ran
    assert charge_state(app)["captured"] is False
    assert stats(app)["faults_injected"] == {"outage": 1}


def test_outage_after_commit_on_refunds(app: SandboxApp) -> None:
    charge = authorize(app, capture=None)
    setting = {
        "duration_seconds": 60,
        "failure": 500,
        "phase": "after_commit",
        "endpoints": ["POST /refunds"],
    }
    post(app, "/_sandbox/conditions/outage", setting, key=None)
    assert_problem(refund(app, charge["id"], amount=10), 500, "api_error")
    assert charge_state(app)["amount_refunded"] == 10
    post(app, "/_sandbox/conditions/outage", {**setting, "failure": "reset"}, key=None)
    assert refund(app, charge["id"], key="re-2", amount=10).action == "reset"
    assert charge_state(app)["amount_refunded"] == 20


def test_refused_connections_per_endpoint(app: SandboxApp) -> None:
    setting = {
        "duration_seconds": 60,
        "failure": "refused",
        "endpoints": ["POST /charges/{id}/void"],
    }
    post(app, "/_sandbox/conditions/outage", setting, key=None)
    assert app.refuses_connection("POST", "/charges/ch_x/void")
    assert not app.refuses_connection("POST", "/charges/ch_x/capture")
    assert not app.refuses_connection("POST", "/charges")


def test_rate_limit_on_refund_lookups(app: SandboxApp) -> None:
    post(
        app,
        "/_sandbox/conditions/rate_limit",
        {"limit": 1, "window_seconds": 60, "endpoints": ["GET /refunds"]},
        key=None,
    )
    assert get(app, "/refunds", "reference=a").status == 200
    assert get(app, "/refunds", "reference=a").status == 429
    assert get(app, "/charges", "reference=a").status == 200


def test_endpoint_labels() -> None:
    label = SandboxApp.endpoint_label
    assert label("POST", "/charges/ch_abc/capture") == "POST /charges/{id}/capture"
    assert label("POST", "/charges/ch_abc/void") == "POST /charges/{id}/void"
    assert label("GET", "/refunds") == "GET /refunds"
    assert label("POST", "/charges/ch_abc/refund") == "other"
    assert label("POST", "/charges/a/b/capture") == "other"


def test_wrong_methods_on_the_new_paths(app: SandboxApp) -> None:
    answer = get(app, "/charges/ch_x/capture")
    assert_problem(answer, 405, "method_not_allowed")
    assert header(answer, "Allow") == "POST"
    assert_problem(app.handle(Request(method="DELETE", path="/refunds")), 405, "method_not_allowed")


# -- listings, stats and bounds -------------------------------------------------------------


def test_settlement_listings_show_captures_and_refunds(app: SandboxApp) -> None:
    charge = authorize(app)
    capture(app, charge["id"], amount=8000)
    refund(app, charge["id"], amount=500, reference="re_a", key="ra")
    refund(app, charge["id"], amount=700, reference="re_b", key="rb")
    (row,) = body_of(get(app, "/_sandbox/charges"))["data"]
    assert (row["amount_captured"], row["amount_refunded"]) == (8000, 1200)
    refunds = body_of(get(app, "/_sandbox/refunds"))
    assert [(r["reference"], r["amount"], r["idempotency_key"]) for r in refunds["data"]] == [
        ("re_a", 500, "ra"),
        ("re_b", 700, "rb"),
    ]
    assert refunds["has_more"] is False
    page = body_of(get(app, "/_sandbox/refunds", "limit=1"))
    assert page["has_more"] is True
    after = body_of(get(app, "/_sandbox/refunds", f"starting_after={page['data'][0]['id']}"))
    assert [r["reference"] for r in after["data"]] == ["re_b"]
    assert_problem(get(app, "/_sandbox/refunds", "starting_after=re_nope"), 400, "invalid_request")
    assert body_of(get(app, "/_sandbox/refunds", api_key=OTHER_API_KEY))["data"] == []


def test_stats_count_the_new_operations(app: SandboxApp) -> None:
    charge = authorize(app)
    capture(app, charge["id"], key="c")
    capture(app, charge["id"], key="c")  # a replay adds nothing
    refund(app, charge["id"], key="r", amount=1)
    other = authorize(app, reference="pay_2")
    void(app, other["id"], key="v")
    counters = stats(app)
    assert counters["captures_total"] == 1 and counters["voids_total"] == 1
    assert counters["refunds_total"] == 1
    assert counters["captures_by_charge_reference"] == {"pay_1": 1}
    assert counters["voids_by_charge_reference"] == {"pay_2": 1}
    assert counters["refunds_by_charge_reference"] == {"pay_1": 1}
    assert counters["captures_by_idempotency_key"] == {"c": 1}
    assert counters["voids_by_idempotency_key"] == {"v": 1}
    assert counters["refunds_by_idempotency_key"] == {"r": 1}


def test_reset_forgets_captures_and_refunds(app: SandboxApp) -> None:
    charge = authorize(app, capture=None)
    refund(app, charge["id"], reference="re_x")
    app.handle(Request(method="POST", path="/_sandbox/reset"))
    assert body_of(get(app, "/refunds", "reference=re_x"))["data"] == []
    assert_problem(refund(app, charge["id"], key="again"), 404, "charge_not_found")
    assert stats(app)["refunds_total"] == 0


def test_new_tables_are_bounded(clock: FakeClock) -> None:
    app = make_app(clock, lambda seconds: False, max_tracked_keys=3)
    charges = [authorize(app, capture=None, reference=f"pay_{n}") for n in range(5)]
    for charge in charges[2:]:
        refund(app, charge["id"], key=f"r-{charge['id']}", reference=f"re_{charge['id']}", amount=1)
    evicted = stats(app)["evicted"]
    assert evicted["charges_for_operations"] == 2
    # The two oldest charges can no longer be found for an operation.
    assert_problem(refund(app, charges[0]["id"], key="old"), 404, "charge_not_found")
    for charge in charges[2:]:
        refund(
            app, charge["id"], key=f"r2-{charge['id']}", reference=f"re2_{charge['id']}", amount=1
        )
    counters = stats(app)
    assert len(counters["refunds_by_idempotency_key"]) == 3
    assert counters["evicted"]["refunds_by_idempotency_key"] == 3
    assert counters["evicted"]["refunds_for_lookup"] == 3
    assert counters["evicted"]["refunds_listed"] == 3
    assert len(body_of(get(app, "/_sandbox/refunds"))["data"]) == 3
    assert counters["refunds_total"] == 6


def test_operation_refused_carries_its_status() -> None:
    refused = OperationRefused("charge_not_found", "x", status=404)
    assert (refused.code, refused.status) == ("charge_not_found", 404)


def test_capacity_latency_and_flapping_reach_the_operations(
    app: SandboxApp, wait: FakeWait, clock: FakeClock
) -> None:
    charge = authorize(app)
    post(app, "/_sandbox/conditions/latency", {"distribution": "fixed", "ms": 250}, key=None)
    assert capture(app, charge["id"], amount=5000).status == 200
    assert wait.calls == [0.25]
    post(app, "/_sandbox/conditions/latency", {"distribution": "fixed", "ms": 0}, key=None)
    post(app, "/_sandbox/conditions/capacity", {"max_per_second": 1, "retry_after": 2}, key=None)
    clock.advance(1)
    assert refund(app, charge["id"], key="r1", amount=1).status == 201
    refused = refund(app, charge["id"], key="r2", amount=1)
    assert_problem(refused, 503, "service_unavailable")
    assert header(refused, "Retry-After") == "2"
    app.handle(Request(method="DELETE", path="/_sandbox/conditions/capacity"))
    flapping = {
        "healthy_seconds": 10,
        "failing_seconds": 5,
        "start": "failing",
        "failure": 502,
        "endpoints": ["POST /refunds"],
    }
    post(app, "/_sandbox/conditions/flapping", flapping, key=None)
    assert_problem(refund(app, charge["id"], key="r3", amount=1), 502, "bad_gateway")
    clock.advance(5)
    assert refund(app, charge["id"], key="r3", amount=1).status == 201
    assert charge_state(app)["amount_refunded"] == 2

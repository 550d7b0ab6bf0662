"""SandboxApp without sockets: per-payment scenarios, conditions and the control API, with an
injected clock and a fake wait, so every header value and every delay is exact."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox_acquirer.app import Request, Response, SandboxApp
from sandbox_acquirer.conditions import ConditionSet
from sandbox_acquirer.faults import PROBLEMS
from sandbox_acquirer.scenarios import ScenarioSettings
from sandbox_acquirer.store import SandboxStore
from tests.support.fake_time import FakeClock, FakeWait

# 2026-11-29T17:00:00.250Z: a quarter second past a whole minute, to exercise rounding.
START = datetime(2026, 11, 29, 17, 0, 0, 250_000, tzinfo=UTC)
API_KEY = "sk_unit"
OTHER_API_KEY = "sk_unit_other"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def wait(clock: FakeClock) -> FakeWait:
    return FakeWait(clock)


@pytest.fixture
def app(clock: FakeClock, wait: FakeWait) -> SandboxApp:
    return SandboxApp(
        store=SandboxStore(clock=clock),
        api_keys=(API_KEY, OTHER_API_KEY),
        scenario_settings=ScenarioSettings(hang_seconds=2.0, trickle_seconds_per_byte=1.0),
        wait=wait,
    )


def charge(
    app: SandboxApp,
    token: str = "tok_visa",
    key: str = "key-1",
    reference: str = "order-1",
    api_key: str = API_KEY,
) -> Response:
    body = {"amount": 1050, "currency": "EUR", "payment_method": token, "reference": reference}
    return app.handle(
        Request(
            method="POST",
            path="/charges",
            headers={
                "authorization": f"Bearer {api_key}",
                "idempotency-key": key,
                "content-type": "application/json",
            },
            body=json.dumps(body).encode(),
        )
    )


def lookup(app: SandboxApp, reference: str = "order-1") -> Response:
    return app.handle(
        Request(
            method="GET",
            path="/charges",
            query=f"reference={reference}",
            headers={"authorization": f"Bearer {API_KEY}"},
        )
    )


def control(app: SandboxApp, method: str, path: str, body: Any = None) -> Response:
    raw = (
        body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    )
    return app.handle(Request(method=method, path=path, body=raw))


def body_of(response: Response) -> dict[str, Any]:
    return json.loads(response.body)


def header(response: Response, name: str) -> str | None:
    values = [value for key, value in response.headers if key.lower() == name.lower()]
    return values[0] if values else None


def charges_total(app: SandboxApp) -> int:
    return app.store.stats()["charges_total"]


# -- tok_fail_<status>_<n> -------------------------------------------------------------------------


def test_fail_token_fails_n_attempts_then_approves_and_replays(app: SandboxApp) -> None:
    """tok_fail_503_2: 503, 503, then 201, then the 201 replayed."""
    statuses = [charge(app, "tok_fail_503_2").status for _ in range(4)]
    replay = charge(app, "tok_fail_503_2")

    assert statuses == [503, 503, 201, 201]
    assert header(replay, "Idempotent-Replayed") == "true"
    assert charges_total(app) == 1


def test_failed_attempts_record_nothing(app: SandboxApp) -> None:
    """The failing attempts of tok_fail_ record no charge and hold no key."""
    charge(app, "tok_fail_500_2")
    charge(app, "tok_fail_500_2")

    assert charges_total(app) == 0
    assert body_of(lookup(app))["data"] == []


@pytest.mark.parametrize("status", sorted(PROBLEMS))
def test_fail_token_answers_a_problem_body_for_its_status(app: SandboxApp, status: int) -> None:
    """Each tok_fail_ status answers a problem body with that status and its code."""
    response = charge(app, f"tok_fail_{status}_1")

    problem = body_of(response)
    assert response.status == problem["status"] == status
    assert problem["code"] == PROBLEMS[status][0]
    assert problem["type"].endswith("/" + problem["code"])
    assert problem["title"] and problem["detail"]


def test_fail_403_is_a_plain_permission_error(app: SandboxApp) -> None:
    """tok_fail_403_1 carries no rate-limit header and no rate-limit code."""
    response = charge(app, "tok_fail_403_1")

    assert body_of(response)["code"] == "permission_denied"
    assert [name for name, _ in response.headers] == []


def test_fail_429_has_no_retry_after(app: SandboxApp) -> None:
    """tok_fail_429_1 is a bare 429 (tok_ratelimit_<s> is the one with Retry-After)."""
    assert header(charge(app, "tok_fail_429_1"), "Retry-After") is None


def test_fail_401_carries_a_bearer_challenge(app: SandboxApp) -> None:
    """tok_fail_401_1 answers like a real authentication failure."""
    assert header(charge(app, "tok_fail_401_1"), "WWW-Authenticate").startswith("Bearer")


def test_fail_409_carries_retry_after_one(app: SandboxApp) -> None:
    """tok_fail_409_1 answers like the sandbox's own in-flight 409."""
    assert header(charge(app, "tok_fail_409_1"), "Retry-After") == "1"


def test_fail_attempts_are_counted_per_idempotency_key(app: SandboxApp) -> None:
    """Two payments with the same token each get their own two failures."""
    first = [charge(app, "tok_fail_502_1", key="pay-a").status for _ in range(2)]
    second = [charge(app, "tok_fail_502_1", key="pay-b").status for _ in range(2)]

    assert first == second == [502, 201]


def test_fail_attempts_are_counted_per_api_key(app: SandboxApp) -> None:
    """The same Idempotency-Key under another API key starts its own sequence."""
    charge(app, "tok_fail_504_1", key="shared")

    assert charge(app, "tok_fail_504_1", key="shared", api_key=OTHER_API_KEY).status == 504


def test_reset_restarts_a_fail_sequence(app: SandboxApp) -> None:
    """After POST /_sandbox/reset the key's attempts count from 1 again."""
    charge(app, "tok_fail_503_1")
    control(app, "POST", "/_sandbox/reset")

    assert charge(app, "tok_fail_503_1").status == 503


def test_injected_failures_are_counted_in_stats(app: SandboxApp) -> None:
    """faults_injected counts each injected answer by its source."""
    charge(app, "tok_fail_503_2")
    charge(app, "tok_fail_503_2")

    assert app.store.stats()["faults_injected"] == {"tok_fail": 2}


# -- tok_ratelimit_<s>, tok_ratelimit_date_<s> -----------------------------------------------------


def test_ratelimit_token_answers_429_with_delay_seconds_once(app: SandboxApp) -> None:
    """tok_ratelimit_5: 429 with Retry-After: 5 and a rate_limited body, then 201."""
    first = charge(app, "tok_ratelimit_5")
    second = charge(app, "tok_ratelimit_5")

    assert (first.status, header(first, "Retry-After")) == (429, "5")
    assert body_of(first)["code"] == "rate_limited"
    assert second.status == 201


def test_ratelimit_date_token_answers_an_imf_fixdate_ahead(app: SandboxApp) -> None:
    """tok_ratelimit_date_30 at 17:00:00.25: Retry-After is 17:00:31 GMT (rounded up)."""
    response = charge(app, "tok_ratelimit_date_30")

    assert header(response, "Retry-After") == "Sun, 29 Nov 2026 17:00:31 GMT"


# -- connection faults -----------------------------------------------------------------------------


def test_reset_before_commit_resets_every_attempt_and_records_nothing(app: SandboxApp) -> None:
    """tok_reset_before_commit drops the connection on each attempt; no charge, key free."""
    actions = [charge(app, "tok_reset_before_commit").action for _ in range(3)]

    assert actions == ["reset", "reset", "reset"]
    assert charges_total(app) == 0
    assert app.store.stats()["idempotency_keys"] == 0


def test_close_before_commit_closes_without_an_answer(app: SandboxApp) -> None:
    """tok_close_before_commit ends the connection with a FIN, nothing recorded."""
    assert charge(app, "tok_close_before_commit").action == "close"
    assert charges_total(app) == 0


def test_reset_after_commit_records_then_resets_and_the_retry_replays(app: SandboxApp) -> None:
    """tok_reset_after_commit: the charge is recorded, the connection reset; a retry replays."""
    first = charge(app, "tok_reset_after_commit", reference="order-reset")
    retry = charge(app, "tok_reset_after_commit", reference="order-reset")

    assert first.action == "reset"
    assert retry.status == 201
    assert header(retry, "Idempotent-Replayed") == "true"
    assert [item["id"] for item in body_of(lookup(app, "order-reset"))["data"]] == [
        body_of(retry)["id"]
    ]


def test_close_after_commit_records_then_closes(app: SandboxApp) -> None:
    """tok_close_after_commit: recorded, then the connection is closed without an answer."""
    assert charge(app, "tok_close_after_commit").action == "close"
    assert charges_total(app) == 1


# -- trickle, lookup lag, timeout ------------------------------------------------------------------


def test_trickle_records_and_asks_for_a_paced_body(app: SandboxApp) -> None:
    """tok_trickle answers the 201 charge, to be sent one byte per second."""
    response = charge(app, "tok_trickle")

    assert response.status == 201
    assert response.trickle_seconds_per_byte == 1.0
    assert charges_total(app) == 1


def test_trickle_replay_is_sent_at_once(app: SandboxApp) -> None:
    """A retry of a trickled charge gets the replay without pacing."""
    charge(app, "tok_trickle")

    assert charge(app, "tok_trickle").trickle_seconds_per_byte == 0


def test_lookup_lag_hides_the_charge_for_exactly_its_lag(app: SandboxApp, clock: FakeClock) -> None:
    """tok_lookup_lag_30: absent from GET /charges at 29.999 s, listed at 30 s."""
    created = charge(app, "tok_lookup_lag_30")
    clock.advance(29.999)
    before = body_of(lookup(app))["data"]
    clock.advance(0.001)

    assert created.status == 201
    assert before == []
    assert [item["id"] for item in body_of(lookup(app))["data"]] == [body_of(created)["id"]]


def test_timeout_after_commit_waits_hang_seconds_after_recording(
    app: SandboxApp, wait: FakeWait
) -> None:
    """tok_timeout_after_commit pauses hang_seconds (2 s here) before the 201."""
    assert charge(app, "tok_timeout_after_commit").status == 201
    assert wait.calls == [2.0]


def test_slow_token_waits_before_recording(app: SandboxApp, wait: FakeWait) -> None:
    """tok_slow_250 pauses 0.25 s."""
    charge(app, "tok_slow_250")

    assert wait.calls == [0.25]


# -- outages and flapping --------------------------------------------------------------------------


def test_outage_answers_its_status_and_records_nothing(app: SandboxApp) -> None:
    """During a 503 outage with retry_after 5, POST /charges answers 503 + Retry-After: 5."""
    control(app, "POST", "/_sandbox/conditions/outage",
            {"duration_seconds": 10, "failure": 503, "retry_after": 5})  # fmt: skip

    response = charge(app)

    assert (response.status, header(response, "Retry-After")) == (503, "5")
    assert body_of(response)["code"] == "service_unavailable"
    assert charges_total(app) == 0


def test_outage_ends_after_its_duration(app: SandboxApp, clock: FakeClock) -> None:
    """After duration_seconds the acquirer answers normally again."""
    control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 10})
    clock.advance(10)

    assert charge(app).status == 201


def test_outage_retry_after_date_is_an_http_date(app: SandboxApp) -> None:
    """retry_after_format=date renders the wait as an IMF-fixdate."""
    control(app, "POST", "/_sandbox/conditions/outage",
            {"duration_seconds": 10, "retry_after": 60, "retry_after_format": "date"})  # fmt: skip

    assert header(charge(app), "Retry-After") == "Sun, 29 Nov 2026 17:01:01 GMT"


def test_outage_after_commit_records_the_charge_but_answers_the_failure(app: SandboxApp) -> None:
    """phase=after_commit: the charge is recorded, the answer is the outage's 502."""
    control(app, "POST", "/_sandbox/conditions/outage",
            {"duration_seconds": 10, "failure": 502, "phase": "after_commit"})  # fmt: skip

    response = charge(app)

    assert response.status == 502
    assert charges_total(app) == 1


def test_outage_with_reset_drops_the_connection(app: SandboxApp) -> None:
    """failure=reset: the request gets no answer, nothing is recorded."""
    control(app, "POST", "/_sandbox/conditions/outage",
            {"duration_seconds": 10, "failure": "reset"})  # fmt: skip

    assert charge(app).action == "reset"
    assert charges_total(app) == 0


def test_outage_with_refused_refuses_before_reading(app: SandboxApp) -> None:
    """failure=refused: the server is told to refuse acquirer requests, not control calls."""
    control(app, "POST", "/_sandbox/conditions/outage",
            {"duration_seconds": 10, "failure": "refused"})  # fmt: skip

    assert app.refuses_connection("POST", "/charges") is True
    assert app.refuses_connection("GET", "/_sandbox/stats") is False
    assert charge(app).action == "refused"


def test_outage_spares_healthz_and_the_control_api(app: SandboxApp) -> None:
    """During an outage /healthz and /_sandbox/stats still answer 200."""
    control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 10})

    assert app.handle(Request(method="GET", path="/healthz")).status == 200
    assert control(app, "GET", "/_sandbox/stats").status == 200


def test_flapping_fails_only_in_failing_periods(app: SandboxApp, clock: FakeClock) -> None:
    """healthy 2 s / failing 1 s: 201 at 0 s, 503 at 2.5 s, 201 at 3 s."""
    control(app, "POST", "/_sandbox/conditions/flapping",
            {"healthy_seconds": 2, "failing_seconds": 1})  # fmt: skip
    statuses = []
    for key, step in (("a", 0), ("b", 2.5), ("c", 0.5)):
        clock.advance(step)
        statuses.append(charge(app, key=key).status)

    assert statuses == [201, 503, 201]


# -- rate limit, capacity, latency -----------------------------------------------------------------


def test_rate_limit_answers_429_with_headers_over_the_limit(app: SandboxApp) -> None:
    """limit 1 per 60 s: the second request is a 429 with Retry-After and reset epoch."""
    control(app, "POST", "/_sandbox/conditions/rate_limit", {"limit": 1, "window_seconds": 60})
    first = charge(app, key="a")

    second = charge(app, key="b")

    reset = int(datetime(2026, 11, 29, 17, 1, tzinfo=UTC).timestamp())
    assert (first.status, header(first, "x-ratelimit-remaining")) == (201, "0")
    assert second.status == 429
    assert body_of(second)["code"] == "rate_limited"
    assert header(second, "Retry-After") == "60"
    assert header(second, "x-ratelimit-reset") == str(reset)
    assert header(second, "RateLimit") == '"default";r=0;t=60'
    assert charges_total(app) == 1


def test_secondary_rate_limit_answers_403_without_reset_header(app: SandboxApp) -> None:
    """mode=secondary: 403 secondary_rate_limit, no x-ratelimit-reset, no Retry-After."""
    control(app, "POST", "/_sandbox/conditions/rate_limit",
            {"limit": 1, "window_seconds": 60, "mode": "secondary"})  # fmt: skip
    charge(app, key="a")

    response = charge(app, key="b")

    assert response.status == 403
    assert body_of(response)["code"] == "secondary_rate_limit"
    assert response.headers == ()


def test_unauthenticated_requests_are_not_rate_limited(app: SandboxApp) -> None:
    """A 401 does not use the quota."""
    control(app, "POST", "/_sandbox/conditions/rate_limit", {"limit": 1, "window_seconds": 60})
    charge(app, api_key="sk_wrong")

    assert charge(app).status == 201


def test_capacity_refuses_over_max_per_second_after_the_overload_delay(
    app: SandboxApp, wait: FakeWait
) -> None:
    """max_per_second 1 with overload_delay_ms 300: the second request waits 0.3 s, gets 503."""
    control(app, "POST", "/_sandbox/conditions/capacity",
            {"max_per_second": 1, "overload_delay_ms": 300, "retry_after": 1})  # fmt: skip
    charge(app, key="a")

    refused = charge(app, key="b")

    assert (refused.status, header(refused, "Retry-After")) == (503, "1")
    assert wait.calls == [0.3]
    assert app.store.stats()["faults_injected"] == {"capacity": 1}


def test_requests_in_flight_are_released_after_each_request(app: SandboxApp) -> None:
    """The in-flight gauge returns to zero after requests, failed or not."""
    charge(app)
    charge(app, "tok_fail_500_1", key="b")

    assert app.store.stats()["requests_in_flight"] == 0


def test_latency_delays_each_acquirer_request(app: SandboxApp, wait: FakeWait) -> None:
    """A fixed 40 ms latency pauses each /charges request 0.04 s, not /healthz."""
    control(app, "POST", "/_sandbox/conditions/latency", {"distribution": "fixed", "ms": 40})
    charge(app)
    lookup(app)
    app.handle(Request(method="GET", path="/healthz"))

    assert wait.calls == [0.04, 0.04]


# -- control API -----------------------------------------------------------------------------------


def test_setting_a_condition_echoes_it_normalised(app: SandboxApp, clock: FakeClock) -> None:
    """POST /_sandbox/conditions/outage answers 200 with the stored condition."""
    response = control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 5})

    assert response.status == 200
    assert body_of(response)["outage"]["ends_at"] == clock.now.timestamp() + 5


def test_put_sets_a_condition_like_post(app: SandboxApp) -> None:
    """PUT is accepted as well as POST."""
    response = control(app, "PUT", "/_sandbox/conditions/latency", {"ms": 5})

    assert response.status == 200


def test_invalid_condition_is_400_and_changes_nothing(app: SandboxApp) -> None:
    """A bad value answers 400 invalid_request naming the field; no condition is set."""
    response = control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": -1})

    assert response.status == 400
    assert body_of(response)["code"] == "invalid_request"
    assert "duration_seconds" in body_of(response)["detail"]
    assert body_of(control(app, "GET", "/_sandbox/conditions"))["outage"] is None


@pytest.mark.parametrize("raw", [b"", b"{nope", b"[1]", b'{"a": NaN}', b"\xff"])
def test_condition_body_that_is_not_a_json_object_is_400(app: SandboxApp, raw: bytes) -> None:
    """Empty, broken, non-object or non-UTF-8 bodies answer 400, never a crash."""
    assert control(app, "POST", "/_sandbox/conditions/capacity", raw).status == 400


def test_unknown_condition_is_404(app: SandboxApp) -> None:
    """/_sandbox/conditions/weather answers 404 listing the known names."""
    response = control(app, "POST", "/_sandbox/conditions/weather", {})

    assert response.status == 404
    assert "outage" in body_of(response)["detail"]


def test_wrong_method_on_a_condition_is_405(app: SandboxApp) -> None:
    """PATCH is not a condition method."""
    response = control(app, "PATCH", "/_sandbox/conditions/outage", {})

    assert response.status == 405
    assert header(response, "Allow") == "DELETE, GET, POST, PUT"


def test_get_conditions_lists_every_name(app: SandboxApp) -> None:
    """GET /_sandbox/conditions lists each condition, null when unset."""
    control(app, "POST", "/_sandbox/conditions/latency", {"ms": 5})

    listed = body_of(control(app, "GET", "/_sandbox/conditions"))

    assert set(listed) == {"outage", "flapping", "rate_limit", "capacity", "latency"}
    assert listed["latency"]["ms"] == 5
    assert listed["outage"] is None


def test_delete_one_condition_clears_it(app: SandboxApp) -> None:
    """DELETE /_sandbox/conditions/outage ends the outage at once."""
    control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 10})

    control(app, "DELETE", "/_sandbox/conditions/outage")

    assert charge(app).status == 201


def test_delete_all_conditions_clears_them(app: SandboxApp) -> None:
    """DELETE /_sandbox/conditions clears every condition."""
    control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 10})
    control(app, "POST", "/_sandbox/conditions/latency", {"ms": 5})

    listed = body_of(control(app, "DELETE", "/_sandbox/conditions"))

    assert all(value is None for value in listed.values())


def test_reset_clears_conditions_set_through_the_api(app: SandboxApp) -> None:
    """POST /_sandbox/reset removes an outage set through the control API."""
    control(app, "POST", "/_sandbox/conditions/outage", {"duration_seconds": 10})

    control(app, "POST", "/_sandbox/reset")

    assert charge(app).status == 201


def test_reset_keeps_command_line_conditions(clock: FakeClock, wait: FakeWait) -> None:
    """Conditions given at start (the CLI's) are re-applied by reset."""
    app = SandboxApp(
        store=SandboxStore(clock=clock),
        api_keys=(API_KEY,),
        conditions=ConditionSet({"outage": {"duration_seconds": 10}}),
        wait=wait,
    )
    clock.advance(20)

    control(app, "POST", "/_sandbox/reset")

    assert charge(app).status == 503


# -- stats export ----------------------------------------------------------------------------------


def test_stats_csv_has_one_row_per_value(app: SandboxApp) -> None:
    """GET /_sandbox/stats?format=csv lists metric,key,value rows."""
    charge(app)

    response = app.handle(Request(method="GET", path="/_sandbox/stats", query="format=csv"))

    lines = response.body.decode().splitlines()
    assert response.content_type.startswith("text/csv")
    assert lines[0] == "metric,key,value"
    assert "charges_total,,1" in lines
    assert "requests_by_endpoint.POST /charges,201,1" not in lines  # counted by the server
    assert "charges_by_idempotency_key,key-1,1" in lines


def test_export_endpoint_serves_json_by_default(app: SandboxApp) -> None:
    """GET /_sandbox/export is the stats document, JSON unless format=csv."""
    response = app.handle(Request(method="GET", path="/_sandbox/export"))

    assert body_of(response)["charges_total"] == 0


def test_unknown_stats_format_is_400(app: SandboxApp) -> None:
    """format=xml answers 400."""
    response = app.handle(Request(method="GET", path="/_sandbox/stats", query="format=xml"))

    assert response.status == 400

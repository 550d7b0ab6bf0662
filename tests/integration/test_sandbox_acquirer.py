"""The sandbox acquirer over real HTTP: one subprocess for the module, reset before each test.

The process runs with ``--hang-seconds 2`` (so ``tok_timeout_after_commit`` stays short) and
``--trickle-seconds-per-byte 0.005`` (so ``tok_trickle`` takes about a second), and accepts two
API keys, one per account. Tests that need their own command line start their own process.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.sandbox import SandboxProcess

API_KEY = "sandbox_sk_test_primary"
OTHER_API_KEY = "sandbox_sk_test_other"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The stats keys the service's test-suite relies on (never renamed).
ORIGINAL_STATS = ("charges_total", "charges_by_reference", "requests_total", "requests_by_status")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    with SandboxProcess.start(
        api_key=API_KEY,
        extra_args=(
            "--hang-seconds",
            "2",
            "--trickle-seconds-per-byte",
            "0.005",
            "--api-key",
            OTHER_API_KEY,
        ),  # fmt: skip
    ) as process:
        yield process


@pytest.fixture(autouse=True)
def _fresh_sandbox(sandbox: SandboxProcess) -> None:
    sandbox.reset()


@pytest.fixture
def client(sandbox: SandboxProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sandbox.url, headers=sandbox.auth_headers(), timeout=10.0, trust_env=False
    ) as http:
        yield http


def charge_body(**overrides: Any) -> dict[str, Any]:
    body = {"amount": 1050, "currency": "EUR", "payment_method": "tok_visa", "reference": "order-1"}
    body.update(overrides)
    return body


def post_charge(
    client: httpx.Client, key: str | None, body: dict[str, Any], **kwargs: Any
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post("/charges", json=body, headers=headers, **kwargs)


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    problem = response.json()
    assert problem["status"] == status
    assert problem["code"] == code
    assert problem["type"].endswith("/" + code)
    assert problem["title"]
    assert problem["detail"]


# -- basics -----------------------------------------------------------------------------


def test_healthz_answers_ok_without_auth(sandbox: SandboxProcess) -> None:
    """GET /healthz needs no API key and answers {"status": "ok"}."""
    response = httpx.get(f"{sandbox.url}/healthz", trust_env=False)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_visa_token_is_approved(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """tok_visa gives a 201 approved charge echoing the request, dated in RFC 3339 UTC."""
    response = post_charge(client, "approve-1", charge_body())

    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    assert "idempotent-replayed" not in response.headers
    charge = response.json()
    assert charge["id"].startswith("ch_")
    assert charge["status"] == "approved"
    assert charge["decline_code"] is None
    assert (charge["amount"], charge["currency"], charge["reference"]) == (1050, "EUR", "order-1")
    assert time.strptime(charge["created_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert sandbox.stats()["charges_total"] == 1


def test_unknown_token_is_approved(client: httpx.Client) -> None:
    """A tok_ token the sandbox does not know is approved."""
    response = post_charge(client, "unknown-token", charge_body(payment_method="tok_mastercard"))

    assert response.status_code == 201
    assert response.json()["status"] == "approved"


@pytest.mark.parametrize(
    ("token", "decline_code"),
    [("tok_decline", "do_not_honor"), ("tok_insufficient_funds", "insufficient_funds")],
)
def test_decline_tokens_give_a_declined_charge_with_its_code(
    client: httpx.Client, sandbox: SandboxProcess, token: str, decline_code: str
) -> None:
    """A decline is a recorded 201 charge with status declined and the token's code."""
    response = post_charge(client, f"decline-{token}", charge_body(payment_method=token))

    assert response.status_code == 201
    assert response.json()["status"] == "declined"
    assert response.json()["decline_code"] == decline_code
    assert sandbox.stats()["charges_total"] == 1


# -- authentication ---------------------------------------------------------------------


def test_missing_api_key_is_401_and_records_nothing(sandbox: SandboxProcess) -> None:
    """POST /charges without Authorization answers 401 and records no charge."""
    response = httpx.post(
        f"{sandbox.url}/charges",
        json=charge_body(),
        headers={"Idempotency-Key": "no-auth"},
        trust_env=False,
    )

    assert_problem(response, 401, "authentication_required")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert sandbox.stats()["charges_total"] == 0


def test_wrong_api_key_is_401_and_records_nothing(sandbox: SandboxProcess) -> None:
    """POST /charges with an unknown bearer key answers 401 and records no charge."""
    response = httpx.post(
        f"{sandbox.url}/charges",
        json=charge_body(),
        headers={"Idempotency-Key": "bad-auth", "Authorization": "Bearer sandbox_sk_wrong"},
        trust_env=False,
    )

    assert_problem(response, 401, "invalid_api_key")
    assert sandbox.stats()["charges_total"] == 0


def test_listing_charges_requires_the_api_key(sandbox: SandboxProcess) -> None:
    """GET /charges without Authorization answers 401."""
    response = httpx.get(f"{sandbox.url}/charges", params={"reference": "order-1"}, trust_env=False)

    assert_problem(response, 401, "authentication_required")


# -- request validation -----------------------------------------------------------------


def test_missing_idempotency_key_is_400_and_records_nothing(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """POST /charges without Idempotency-Key answers 400 and records no charge."""
    response = post_charge(client, None, charge_body())

    assert_problem(response, 400, "invalid_request")
    assert sandbox.stats()["charges_total"] == 0


@pytest.mark.parametrize("key", ["", "ab c", "a" * 256, "kéy"])
def test_malformed_idempotency_key_is_400(client: httpx.Client, key: str) -> None:
    """An empty, spaced, over-long (256) or non-ASCII Idempotency-Key answers 400."""
    response = client.post(
        "/charges",
        json=charge_body(),
        headers={"Idempotency-Key": key.encode("utf-8")},  # type: ignore[dict-item]
    )

    assert_problem(response, 400, "invalid_request")


def test_longest_idempotency_key_is_accepted(client: httpx.Client) -> None:
    """An Idempotency-Key of 255 printable characters is accepted."""
    response = post_charge(client, "a" * 255, charge_body())

    assert response.status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(charge_body(amount=0), id="amount-zero"),
        pytest.param(charge_body(amount=-5), id="amount-negative"),
        pytest.param(charge_body(amount=10.5), id="amount-fraction"),
        pytest.param(charge_body(amount="1050"), id="amount-string"),
        pytest.param(charge_body(amount=True), id="amount-bool"),
        pytest.param(charge_body(currency="eur"), id="currency-lower-case"),
        pytest.param(charge_body(currency="EURO"), id="currency-four-letters"),
        pytest.param(charge_body(payment_method="card_4242"), id="payment-method-not-token"),
        pytest.param(charge_body(payment_method="tok_slow_soon"), id="slow-token-not-a-number"),
        pytest.param(charge_body(payment_method="tok_slow_60001"), id="slow-token-too-slow"),
        pytest.param(charge_body(reference=""), id="reference-empty"),
        pytest.param(charge_body(reference=7), id="reference-not-string"),
        pytest.param(charge_body(extra="x"), id="unknown-field"),
        pytest.param({"amount": 1050, "currency": "EUR", "payment_method": "tok_visa"},
                     id="reference-missing"),
        pytest.param([charge_body()], id="not-an-object"),
    ],
)  # fmt: skip
def test_invalid_body_is_400_and_records_nothing(
    client: httpx.Client, sandbox: SandboxProcess, body: Any
) -> None:
    """A body that breaks the charge schema answers 400 invalid_request, nothing recorded."""
    response = post_charge(client, "invalid-body", body)

    assert_problem(response, 400, "invalid_request")
    assert sandbox.stats()["charges_total"] == 0


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"amount": NaN}', b'{"amount": 1, "amount": 2}', b"\xff\xfe"],
    ids=["syntax", "nan", "duplicate-key", "not-utf8"],
)
def test_invalid_json_is_400(client: httpx.Client, content: bytes) -> None:
    """A body that is not strict UTF-8 JSON answers 400 invalid_request."""
    response = client.post(
        "/charges",
        content=content,
        headers={"Idempotency-Key": "bad-json", "Content-Type": "application/json"},
    )

    assert_problem(response, 400, "invalid_request")


def test_non_json_content_type_is_415(client: httpx.Client) -> None:
    """A form-encoded body answers 415: the sandbox speaks JSON only."""
    response = client.post("/charges", data={"amount": "1050"}, headers={"Idempotency-Key": "form"})

    assert_problem(response, 415, "unsupported_media_type")


def test_validation_failure_leaves_the_key_free(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """After a 400 the same Idempotency-Key runs a valid request as a fresh one."""
    post_charge(client, "retry-after-400", charge_body(amount=0))

    response = post_charge(client, "retry-after-400", charge_body())

    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers
    assert sandbox.stats()["charges_total"] == 1


def test_body_over_64_kib_is_413(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """A body of 64 KiB + 1 byte answers 413 and records nothing."""
    response = client.post(
        "/charges",
        content=b" " * (64 * 1024 + 1),
        headers={"Idempotency-Key": "too-big", "Content-Type": "application/json"},
    )

    assert_problem(response, 413, "payload_too_large")
    assert sandbox.stats()["charges_total"] == 0


def test_body_of_exactly_64_kib_is_accepted(client: httpx.Client) -> None:
    """A valid body padded to exactly 64 KiB is within the limit."""
    content = json.dumps(charge_body()).encode()
    content += b" " * (64 * 1024 - len(content))

    response = client.post(
        "/charges",
        content=content,
        headers={"Idempotency-Key": "just-fits", "Content-Type": "application/json"},
    )

    assert response.status_code == 201


def test_unknown_path_is_404(client: httpx.Client) -> None:
    """A path the sandbox does not serve answers 404 JSON."""
    assert_problem(client.get("/payouts"), 404, "not_found")


def test_wrong_method_is_405_with_allow(client: httpx.Client) -> None:
    """A known path with another method answers 405 JSON and lists the allowed methods."""
    response = client.delete("/charges")

    assert_problem(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET, POST"


# -- idempotency ------------------------------------------------------------------------


def test_same_key_and_body_replays_byte_identical(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """The same key with the same JSON (other key order, other spacing) replays the 201."""
    first = post_charge(client, "replay-1", charge_body())
    reordered = (
        b'{ "reference" : "order-1",\n "payment_method": "tok_visa", "currency": "EUR",'
        b' "amount": 1050 }'
    )

    second = client.post(
        "/charges",
        content=reordered,
        headers={"Idempotency-Key": "replay-1", "Content-Type": "application/json"},
    )

    assert second.status_code == first.status_code == 201
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert sandbox.stats()["charges_total"] == 1


def test_replay_of_a_decline_is_the_same_decline(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """A declined charge is a completed result: the same key replays it."""
    first = post_charge(client, "replay-decline", charge_body(payment_method="tok_decline"))

    second = post_charge(client, "replay-decline", charge_body(payment_method="tok_decline"))

    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert sandbox.stats()["charges_total"] == 1


def test_same_key_with_changed_body_is_422(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """The same key with another amount answers 422 idempotency_key_reused, no new charge."""
    post_charge(client, "changed-body", charge_body(amount=1000))

    response = post_charge(client, "changed-body", charge_body(amount=2000))

    assert_problem(response, 422, "idempotency_key_reused")
    assert sandbox.stats()["charges_total"] == 1
    assert sandbox.charges("order-1")[0]["amount"] == 1000


def test_same_key_while_in_flight_is_409(sandbox: SandboxProcess) -> None:
    """Of two overlapping same-key requests one runs (201), the other gets 409 at once."""
    body = charge_body(payment_method="tok_slow_1500")
    # Whichever request claims the key first holds it for 1.5 s; the other, sent at the
    # same moment, finds it in progress. The order does not matter, so assert on the pair.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(
                httpx.post,
                f"{sandbox.url}/charges",
                json=body,
                headers={**sandbox.auth_headers(), "Idempotency-Key": "in-flight"},
                timeout=10.0,
                trust_env=False,
            )
            for _ in range(2)
        ]
        responses = sorted((future.result() for future in futures), key=lambda r: r.status_code)

    created, conflict = responses
    assert created.status_code == 201
    assert_problem(conflict, 409, "idempotency_key_in_use")
    assert conflict.headers["retry-after"] == "1"
    assert sandbox.stats()["charges_total"] == 1


def test_same_key_after_the_slow_request_completes_replays(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """Once a tok_slow_ request has finished, its key replays like any other."""
    first = post_charge(client, "slow-done", charge_body(payment_method="tok_slow_50"))

    second = post_charge(client, "slow-done", charge_body(payment_method="tok_slow_50"))

    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert sandbox.stats()["charges_total"] == 1


def test_idempotency_keys_are_scoped_per_api_key(sandbox: SandboxProcess) -> None:
    """Two API keys using the same Idempotency-Key get two separate charges."""
    responses = [
        httpx.post(
            f"{sandbox.url}/charges",
            json=charge_body(),
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "shared-key"},
            trust_env=False,
        )
        for key in (API_KEY, OTHER_API_KEY)
    ]

    assert [response.status_code for response in responses] == [201, 201]
    assert responses[0].json()["id"] != responses[1].json()["id"]
    assert "idempotent-replayed" not in responses[1].headers
    assert sandbox.stats()["charges_total"] == 2


# -- ambiguous outcomes -------------------------------------------------------------------


def test_timeout_after_commit_then_retry_replays_the_charge(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """A read timeout hides a recorded charge; the retry with the same key replays it."""
    body = charge_body(payment_method="tok_timeout_after_commit", reference="order-timeout")
    with pytest.raises(httpx.ReadTimeout):
        post_charge(client, "hang-1", body, timeout=httpx.Timeout(10.0, read=0.5))

    retry = post_charge(client, "hang-1", body)

    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["id"] == sandbox.charges("order-timeout")[0]["id"]
    assert sandbox.stats()["charges_total"] == 1


def test_timeout_after_commit_answers_after_hang_seconds(client: httpx.Client) -> None:
    """A patient client receives the 201 charge once --hang-seconds (2 s) have passed."""
    started = time.monotonic()

    response = post_charge(client, "hang-2", charge_body(payment_method="tok_timeout_after_commit"))

    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers
    assert time.monotonic() - started >= 1.9


def test_500_after_commit_then_retry_replays_the_same_charge(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """A 500 hides a recorded charge; the retry with the same key gets it as a 201 replay."""
    body = charge_body(payment_method="tok_500_after_commit", reference="order-500")

    first = post_charge(client, "boom-1", body)
    retry = post_charge(client, "boom-1", body)

    assert_problem(first, 500, "api_error")
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    recorded = sandbox.charges("order-500")
    assert [charge["id"] for charge in recorded] == [retry.json()["id"]]
    assert sandbox.stats()["charges_total"] == 1


# -- lookup, stats, reset -----------------------------------------------------------------


def test_lookup_by_reference_lists_charges_oldest_first(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """GET /charges?reference=R lists that reference's charges in creation order: the 201
    body's fields, plus the capture state (an approval without ``capture`` is captured)."""
    first = post_charge(client, "lookup-1", charge_body(reference="order-lookup"))
    second = post_charge(
        client, "lookup-2", charge_body(reference="order-lookup", payment_method="tok_decline")
    )
    post_charge(client, "lookup-3", charge_body(reference="order-other"))

    response = client.get("/charges", params={"reference": "order-lookup"})

    assert response.status_code == 200
    data = response.json()["data"]
    assert [{name: row[name] for name in first.json()} for row in data] == [
        first.json(),
        second.json(),
    ]
    assert [(row["captured"], row["amount_captured"], row["voided"]) for row in data] == [
        (True, first.json()["amount"], False),
        (False, 0, False),
    ]


def test_lookup_only_shows_the_callers_charges(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """Another API key's charges with the same reference are not listed."""
    post_charge(client, "mine", charge_body(reference="order-shared"))

    response = httpx.get(
        f"{sandbox.url}/charges",
        params={"reference": "order-shared"},
        headers={"Authorization": f"Bearer {OTHER_API_KEY}"},
        trust_env=False,
    )

    assert response.json() == {"data": []}


def test_lookup_without_reference_is_400(client: httpx.Client) -> None:
    """GET /charges without a reference parameter answers 400."""
    assert_problem(client.get("/charges"), 400, "invalid_request")


def test_stats_count_charges_and_requests(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """Stats count charges per reference and acquirer requests per status, not control calls."""
    post_charge(client, "stats-1", charge_body(reference="order-a"))
    post_charge(client, "stats-1", charge_body(reference="order-a"))  # a replay
    post_charge(client, "stats-2", charge_body(reference="order-b"))
    post_charge(client, None, charge_body())
    client.get("/healthz")

    stats = sandbox.stats()
    assert {name: stats[name] for name in ORIGINAL_STATS} == {
        "charges_total": 2,
        "charges_by_reference": {"order-a": 1, "order-b": 1},
        "requests_total": 4,
        "requests_by_status": {"201": 3, "400": 1},
    }


def test_reset_clears_ledger_keys_and_counters(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """After POST /_sandbox/reset the counters are zero and an old key runs afresh."""
    first = post_charge(client, "reset-1", charge_body())

    sandbox.reset()

    stats = sandbox.stats()
    assert {name: stats[name] for name in ORIGINAL_STATS} == {
        "charges_total": 0,
        "charges_by_reference": {},
        "requests_total": 0,
        "requests_by_status": {},
    }
    assert sandbox.charges("order-1") == []
    again = post_charge(client, "reset-1", charge_body())
    assert "idempotent-replayed" not in again.headers
    assert again.json()["id"] != first.json()["id"]


# -- the process ------------------------------------------------------------------------


def test_request_log_never_contains_the_api_key(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """The stderr request log has method, path and status, but no bearer key."""
    post_charge(client, "log-1", charge_body())

    log = sandbox.stderr_text()

    assert "POST /charges 201" in log
    assert API_KEY not in log
    assert "Bearer" not in log


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_process_exits_cleanly_on_signal(signum: signal.Signals) -> None:
    """SIGTERM and SIGINT stop the process with exit status 0."""
    process = SandboxProcess.start()
    try:
        process.process.send_signal(signum)
        status = process.process.wait(timeout=10)
    finally:
        process.stop()

    assert status == 0


def test_server_module_imports_only_the_standard_library() -> None:
    """Importing the sandbox loads no Django, DRF, Celery, project app or third-party module."""
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import sandbox_acquirer.server, sandbox_acquirer.__main__\n"
        "new = {name.split('.')[0] for name in set(sys.modules) - before}\n"
        "print(','.join(sorted(new - set(sys.stdlib_module_names) - {'sandbox_acquirer'})))\n"
        "print(','.join(sorted(name for name in sys.modules if name.split('.')[0] in\n"
        "    {'django', 'rest_framework', 'celery', 'config', 'payments', 'idempotency',\n"
        "     'gateway_client'})))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )

    assert result.stdout.splitlines() == ["", ""]


# -- per-payment fault scenarios over real sockets -------------------------------------------


TRICKLE_SECONDS_PER_BYTE = 0.005


def wait_until(condition: Any, timeout: float = 5.0) -> bool:
    """Poll ``condition()`` every 20 ms until it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def test_fail_token_fails_twice_then_charges_once(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """tok_fail_503_2 with one key: 503, 503, 201; three requests and one charge for the key."""
    body = charge_body(payment_method="tok_fail_503_2", reference="order-fail")

    statuses = [post_charge(client, "authorize-fail", body).status_code for _ in range(3)]

    stats = sandbox.stats()
    assert statuses == [503, 503, 201]
    assert stats["requests_by_idempotency_key"]["authorize-fail"] == 3
    assert stats["charges_by_idempotency_key"] == {"authorize-fail": 1}
    assert stats["charges_by_reference"] == {"order-fail": 1}


def test_fail_token_answers_problem_json(client: httpx.Client) -> None:
    """An injected 502 is a problem JSON body with code bad_gateway."""
    response = post_charge(client, "fail-502", charge_body(payment_method="tok_fail_502_1"))

    assert_problem(response, 502, "bad_gateway")


def test_ratelimit_token_sends_retry_after_seconds(client: httpx.Client) -> None:
    """tok_ratelimit_3: a 429 with Retry-After: 3, then the charge."""
    body = charge_body(payment_method="tok_ratelimit_3")

    first = post_charge(client, "ratelimit-1", body)
    second = post_charge(client, "ratelimit-1", body)

    assert_problem(first, 429, "rate_limited")
    assert first.headers["retry-after"] == "3"
    assert second.status_code == 201


def test_ratelimit_date_token_sends_an_imf_fixdate_in_gmt(client: httpx.Client) -> None:
    """tok_ratelimit_date_120: Retry-After is an IMF-fixdate about 120 s ahead."""
    before = time.time()

    response = post_charge(
        client, "ratelimit-date", charge_body(payment_method="tok_ratelimit_date_120")
    )

    value = response.headers["retry-after"]
    moment = datetime.strptime(value, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    assert value == format_datetime(moment, usegmt=True)
    assert before + 120 <= moment.timestamp() + 1 <= time.time() + 122


def test_reset_before_commit_resets_the_connection_and_records_nothing(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """tok_reset_before_commit: a connection reset on each attempt, no charge."""
    body = charge_body(payment_method="tok_reset_before_commit")

    for _ in range(2):
        with pytest.raises(httpx.ReadError):
            post_charge(client, "reset-before", body)

    stats = sandbox.stats()
    assert stats["charges_total"] == 0
    assert stats["requests_unanswered"] == {"reset": 2}
    assert stats["requests_by_idempotency_key"] == {"reset-before": 2}


def test_reset_after_commit_then_retry_replays_the_charge(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """tok_reset_after_commit: reset after recording; the retry gets the charge replayed."""
    body = charge_body(payment_method="tok_reset_after_commit", reference="order-reset")
    with pytest.raises(httpx.ReadError):
        post_charge(client, "reset-after", body)

    retry = post_charge(client, "reset-after", body)

    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert [charge["id"] for charge in sandbox.charges("order-reset")] == [retry.json()["id"]]


def test_close_after_commit_closes_without_an_answer(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """tok_close_after_commit: the client sees the server disconnect, the charge is recorded."""
    with pytest.raises(httpx.RemoteProtocolError):
        post_charge(client, "close-after", charge_body(payment_method="tok_close_after_commit"))

    assert sandbox.stats()["charges_total"] == 1
    assert sandbox.stats()["requests_unanswered"] == {"close": 1}


def test_trickle_sends_the_body_byte_by_byte(client: httpx.Client) -> None:
    """tok_trickle: headers at once, then the 201 body one byte per interval."""
    chunks: list[bytes] = []
    started = time.monotonic()
    with client.stream(
        "POST",
        "/charges",
        json=charge_body(payment_method="tok_trickle"),
        headers={"Idempotency-Key": "trickle-1"},
    ) as response:
        headers_after = time.monotonic() - started
        chunks.extend(response.iter_raw())
    elapsed = time.monotonic() - started

    body = b"".join(chunks)
    assert response.status_code == 201
    assert json.loads(body)["status"] == "approved"
    assert len(chunks) > 10
    assert elapsed >= (len(body) - 1) * TRICKLE_SECONDS_PER_BYTE * 0.9
    assert headers_after < elapsed


def test_lookup_lag_hides_the_charge_for_a_while(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """tok_lookup_lag_1: recorded and counted at once, listed by reference a second later."""
    created = post_charge(
        client, "lag-1", charge_body(payment_method="tok_lookup_lag_1", reference="order-lag")
    )

    assert created.status_code == 201
    assert sandbox.stats()["charges_total"] == 1
    assert sandbox.charges("order-lag") == []
    assert wait_until(lambda: sandbox.charges("order-lag") != [], timeout=3.0)


# -- conditions through the control API --------------------------------------------------------


def set_condition(sandbox: SandboxProcess, name: str, data: Any) -> httpx.Response:
    return httpx.post(f"{sandbox.url}/_sandbox/conditions/{name}", json=data, trust_env=False)


def test_outage_answers_503_with_retry_after(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """An outage set through the control API answers 503 with its Retry-After."""
    assert set_condition(sandbox, "outage", {"duration_seconds": 30, "retry_after": 4}).is_success

    response = post_charge(client, "outage-1", charge_body())

    assert_problem(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "4"
    assert sandbox.stats()["charges_total"] == 0


def test_refused_outage_resets_connections_but_spares_the_control_api(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """failure=refused: /charges connections are reset unanswered; /healthz still answers."""
    set_condition(sandbox, "outage", {"duration_seconds": 30, "failure": "refused"})

    # The RST comes before the body is read: the client sees it on its read (ReadError), or,
    # if it arrives while the body is being sent, as an end of stream (RemoteProtocolError).
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        post_charge(client, "refused-1", charge_body())

    assert httpx.get(f"{sandbox.url}/healthz", trust_env=False).status_code == 200
    assert sandbox.stats()["requests_unanswered"] == {"refused": 1}


def test_invalid_condition_over_http_is_400_and_the_sandbox_keeps_serving(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """A bad condition body answers 400 with a message; the next charge still works."""
    response = set_condition(sandbox, "rate_limit", {"limit": "many", "window_seconds": 60})

    assert_problem(response, 400, "invalid_request")
    assert "rate_limit.limit" in response.json()["detail"]
    assert post_charge(client, "after-bad-condition", charge_body()).status_code == 201


def test_clearing_conditions_ends_an_outage(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """DELETE /_sandbox/conditions (clear_conditions) ends an outage at once."""
    sandbox.set_condition("outage", duration_seconds=30, failure=502)
    failed = post_charge(client, "cleared-1", charge_body())

    sandbox.clear_conditions()

    assert failed.status_code == 502
    assert post_charge(client, "cleared-2", charge_body()).status_code == 201


def test_rate_limit_headers_over_http(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """limit 1 per hour: x-ratelimit-reset is the absolute epoch of the next whole hour."""
    set_condition(sandbox, "rate_limit", {"limit": 1, "window_seconds": 3600})
    post_charge(client, "limited-1", charge_body())
    now = time.time()

    response = post_charge(client, "limited-2", charge_body())

    reset = int(response.headers["x-ratelimit-reset"])
    assert_problem(response, 429, "rate_limited")
    assert reset % 3600 == 0 and now < reset <= now + 3600
    assert response.headers["x-ratelimit-remaining"] == "0"
    assert response.headers["ratelimit-policy"].startswith('"default";q=1;w=3600;pk=:')
    assert abs(now + int(response.headers["retry-after"]) - reset) <= 2


def test_capacity_limit_answers_503_while_full(sandbox: SandboxProcess) -> None:
    """max_concurrent 1: while a slow request runs, another gets 503."""
    assert wait_until(lambda: sandbox.stats()["requests_in_flight"] == 0)  # earlier hangs ended
    sandbox.set_condition("capacity", max_concurrent=1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        slow = pool.submit(
            httpx.post,
            f"{sandbox.url}/charges",
            json=charge_body(payment_method="tok_slow_1000"),
            headers={**sandbox.auth_headers(), "Idempotency-Key": "capacity-slow"},
            timeout=10.0,
            trust_env=False,
        )
        assert wait_until(lambda: sandbox.stats()["requests_in_flight"] == 1)

        refused = httpx.post(
            f"{sandbox.url}/charges",
            json=charge_body(),
            headers={**sandbox.auth_headers(), "Idempotency-Key": "capacity-fast"},
            trust_env=False,
        )
        assert slow.result().status_code == 201

    assert_problem(refused, 503, "service_unavailable")


# -- stats -----------------------------------------------------------------------------------


def test_stats_report_endpoints_arrivals_and_keys(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """Per endpoint and status, per idempotency key, and arrivals in 100 ms buckets."""
    post_charge(client, "stats-k1", charge_body())
    post_charge(client, "stats-k1", charge_body())
    client.get("/charges", params={"reference": "order-1"})

    stats = sandbox.stats()

    assert stats["requests_by_endpoint"] == {
        "POST /charges": {"201": 2, "total": 2},
        "GET /charges": {"200": 1, "total": 1},
    }
    assert stats["requests_by_idempotency_key"] == {"stats-k1": 2}
    assert sum(stats["arrivals_per_100ms"].values()) == 3
    assert all(int(bucket) % 100 == 0 for bucket in stats["arrivals_per_100ms"])


def test_stats_csv_export(client: httpx.Client, sandbox: SandboxProcess) -> None:
    """GET /_sandbox/export?format=csv is text/csv with metric,key,value rows."""
    post_charge(client, "csv-1", charge_body(reference="order-csv"))

    response = httpx.get(
        f"{sandbox.url}/_sandbox/export", params={"format": "csv"}, trust_env=False
    )

    rows = list(csv.reader(io.StringIO(response.text)))
    assert response.headers["content-type"].startswith("text/csv")
    assert sandbox.stats_csv().startswith("metric,key,value\n")
    assert rows[0] == ["metric", "key", "value"]
    assert ["charges_by_reference", "order-csv", "1"] in rows
    assert ["requests_by_endpoint.POST /charges", "201", "1"] in rows


def test_open_connections_follow_clients() -> None:
    """Two kept-alive client connections show in open_connections until they are closed."""
    with SandboxProcess.start(api_key=API_KEY) as own:
        own.stats()  # the helper's own connection: 1 open from now on
        extras = [httpx.Client(base_url=own.url, trust_env=False) for _ in range(2)]
        for extra in extras:
            extra.get("/healthz")

        opened = wait_until(lambda: own.stats()["open_connections"] == 3)
        for extra in extras:
            extra.close()
        closed = wait_until(lambda: own.stats()["open_connections"] == 1)

    assert opened
    assert closed


# -- concurrency and the command line -------------------------------------------------------------


def test_slow_request_does_not_delay_a_concurrent_one() -> None:
    """While tok_slow_30000 is held, a tok_visa on another connection completes first."""
    with (
        SandboxProcess.start(api_key=API_KEY) as own,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        slow = pool.submit(
            httpx.post,
            f"{own.url}/charges",
            json=charge_body(payment_method="tok_slow_30000"),
            headers={**own.auth_headers(), "Idempotency-Key": "slow-30s"},
            timeout=60.0,
            trust_env=False,
        )
        assert wait_until(lambda: own.stats()["requests_in_flight"] == 1)
        started = time.monotonic()

        fast = httpx.post(
            f"{own.url}/charges",
            json=charge_body(),
            headers={**own.auth_headers(), "Idempotency-Key": "fast"},
            timeout=10.0,
            trust_env=False,
        )

        elapsed = time.monotonic() - started
        slow_was_done = slow.done()
        own.stop()  # wakes the held request, so the pool can finish

    assert fast.status_code == 201
    assert not slow_was_done
    assert elapsed < 5.0


def test_command_line_outage_applies_and_survives_reset() -> None:
    """--outage failure=503,... answers 503 from the start and again after a reset."""
    with SandboxProcess.start(
        api_key=API_KEY,
        extra_args=("--outage", "failure=503,duration_seconds=600,retry_after=7"),
    ) as own:
        headers = {**own.auth_headers(), "Idempotency-Key": "cli-outage"}
        first = httpx.post(f"{own.url}/charges", json=charge_body(), headers=headers,
                           trust_env=False)  # fmt: skip
        own.reset()
        second = httpx.post(f"{own.url}/charges", json=charge_body(), headers=headers,
                            trust_env=False)  # fmt: skip

    assert (first.status_code, first.headers["retry-after"]) == (503, "7")
    assert second.status_code == 503


def test_invalid_command_line_condition_exits_with_status_2() -> None:
    """A bad --rate-limit stops the process at once with a message naming the field."""
    result = subprocess.run(
        [sys.executable, "-m", "sandbox_acquirer", "--port", "0",
         "--rate-limit", "limit=0,window_seconds=60"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip

    assert result.returncode == 2
    assert "rate_limit.limit" in result.stderr


# -- manual capture, void and refunds over real HTTP ------------------------------------


def manual_charge(
    client: httpx.Client, token: str = "tok_visa", reference: str = "pay-life", **extra: Any
) -> dict[str, Any]:
    body = charge_body(payment_method=token, reference=reference, amount=10_000, **extra)
    body.setdefault("capture", False)
    response = post_charge(client, f"authorize-{reference}", body)
    assert response.status_code == 201
    return response.json()


def operate(
    client: httpx.Client, operation: str, charge_id: str, key: str, **kwargs: Any
) -> httpx.Response:
    headers = {"Idempotency-Key": key}
    if operation == "refund":
        body = {"charge": charge_id, "reference": f"re-{key}", "amount": 1000}
        return client.post("/refunds", json=body, headers=headers, **kwargs)
    return client.post(f"/charges/{charge_id}/{operation}", json={}, headers=headers, **kwargs)


def charge_for(operation: str) -> dict[str, Any]:
    """A refund needs a captured charge; capture and void an authorized one."""
    return {"capture": True} if operation == "refund" else {}


PLURAL = {"capture": "captures", "void": "voids", "refund": "refunds"}


def test_manual_capture_then_refunds_over_http(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    charge = manual_charge(client)
    captured = client.post(
        f"/charges/{charge['id']}/capture", json={"amount": 6000}, headers={"Idempotency-Key": "c"}
    )
    assert captured.status_code == 200
    assert captured.json()["amount_captured"] == 6000
    for index, amount in enumerate((1000, 2000)):
        response = client.post(
            "/refunds",
            json={"charge": charge["id"], "amount": amount, "reference": f"re_{index}"},
            headers={"Idempotency-Key": f"r{index}"},
        )
        assert response.status_code == 201
    assert [r["amount"] for r in sandbox.refunds("re_1")] == [2000]
    (state,) = sandbox.charges("pay-life")
    assert (state["amount_captured"], state["amount_refunded"]) == (6000, 3000)
    (row,) = sandbox.charge_listing()
    assert (row["amount_captured"], row["amount_refunded"]) == (6000, 3000)
    assert [r["idempotency_key"] for r in sandbox.refund_listing()] == ["r0", "r1"]
    over = client.post(
        "/refunds",
        json={"charge": charge["id"], "amount": 3001, "reference": "re_x"},
        headers={"Idempotency-Key": "rx"},
    )
    assert_problem(over, 422, "amount_exceeds_refundable")
    stats = sandbox.stats()
    assert stats["requests_by_endpoint"]["POST /charges/{id}/capture"] == {"200": 1, "total": 1}
    assert stats["requests_by_endpoint"]["POST /refunds"] == {"201": 2, "422": 1, "total": 3}
    assert stats["requests_by_endpoint"]["GET /refunds"] == {"200": 1, "total": 1}
    assert stats["requests_by_idempotency_key"]["c"] == 1
    assert stats["requests_by_idempotency_key"]["rx"] == 1


@pytest.mark.parametrize("operation", ["capture", "void", "refund"])
def test_timeout_after_commit_on_each_operation_over_http(
    client: httpx.Client, sandbox: SandboxProcess, operation: str
) -> None:
    """The client's read timeout fires although the operation was recorded; the retry with
    the same key replays at once."""
    charge = manual_charge(client, f"tok_{operation}_timeout_after_commit", **charge_for(operation))
    with pytest.raises(httpx.ReadTimeout):
        operate(client, operation, charge["id"], "op", timeout=0.5)
    assert sandbox.stats()[f"{PLURAL[operation]}_total"] == 1
    replay = operate(client, operation, charge["id"], "op", timeout=1.0)
    assert replay.status_code in (200, 201)
    assert replay.headers["idempotent-replayed"] == "true"
    assert sandbox.stats()[f"{PLURAL[operation]}_total"] == 1


@pytest.mark.parametrize("operation", ["capture", "void", "refund"])
def test_500_after_commit_on_each_operation_over_http(
    client: httpx.Client, sandbox: SandboxProcess, operation: str
) -> None:
    charge = manual_charge(client, f"tok_{operation}_500_after_commit", **charge_for(operation))
    assert_problem(operate(client, operation, charge["id"], "op"), 500, "api_error")
    replay = operate(client, operation, charge["id"], "op")
    assert replay.status_code in (200, 201)
    assert sandbox.stats()[f"{PLURAL[operation]}_total"] == 1


@pytest.mark.parametrize("operation", ["capture", "void", "refund"])
def test_reset_after_commit_on_each_operation_over_http(
    client: httpx.Client, sandbox: SandboxProcess, operation: str
) -> None:
    charge = manual_charge(client, f"tok_{operation}_reset_after_commit", **charge_for(operation))
    with pytest.raises(httpx.ReadError):
        operate(client, operation, charge["id"], "op")
    assert sandbox.stats()[f"{PLURAL[operation]}_total"] == 1
    replay = operate(client, operation, charge["id"], "op")
    assert replay.headers["idempotent-replayed"] == "true"
    assert sandbox.stats()["requests_unanswered"] == {"reset": 1}


def test_trickled_refund_and_outage_refusing_voids_over_http(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    charge = manual_charge(client, "tok_refund_trickle", capture=True)
    started = time.monotonic()
    response = operate(client, "refund", charge["id"], "trickle")
    assert response.status_code == 201 and time.monotonic() - started > 0.3
    sandbox.set_condition(
        "outage", duration_seconds=60, failure="refused", endpoints=["POST /charges/{id}/void"]
    )
    other = manual_charge(client, reference="pay-void")
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        operate(client, "void", other["id"], "v")
    assert operate(client, "capture", other["id"], "c").status_code == 200


def in_parallel(sandbox: SandboxProcess, call: Any, arguments: list[Any]) -> list[int]:
    """``call(client, argument)`` for every argument at once, each on its own connection;
    the statuses, sorted."""

    def one(argument: Any) -> int:
        with httpx.Client(
            base_url=sandbox.url, headers=sandbox.auth_headers(), timeout=10.0, trust_env=False
        ) as http:
            return call(http, argument).status_code

    with ThreadPoolExecutor(max_workers=len(arguments)) as pool:
        return sorted(pool.map(one, arguments))


def test_concurrent_refunds_over_http_stay_within_the_captured_amount(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    """Ten concurrent refunds of 2000 on a captured 10000: five 201, five 422."""
    charge = manual_charge(client, capture=True)

    def one(http: httpx.Client, index: int) -> httpx.Response:
        return http.post(
            "/refunds",
            json={"charge": charge["id"], "amount": 2000, "reference": f"re_{index}"},
            headers={"Idempotency-Key": f"refund-{index}"},
        )

    assert in_parallel(sandbox, one, list(range(10))) == [201] * 5 + [422] * 5
    assert sandbox.stats()["refunds_by_charge_reference"] == {"pay-life": 5}
    assert sandbox.charges("pay-life")[0]["amount_refunded"] == 10_000
    assert len(sandbox.refund_listing()) == 5


def test_two_concurrent_captures_with_different_keys_capture_once(
    client: httpx.Client, sandbox: SandboxProcess
) -> None:
    charge = manual_charge(client)
    statuses = in_parallel(
        sandbox,
        lambda http, key: operate(http, "capture", charge["id"], key),
        ["capture-a", "capture-b"],
    )
    assert statuses == [200, 422]
    assert sandbox.stats()["captures_by_charge_reference"] == {"pay-life": 1}


def test_capture_racing_void_one_wins(client: httpx.Client, sandbox: SandboxProcess) -> None:
    charge = manual_charge(client)
    statuses = in_parallel(
        sandbox,
        lambda http, operation: operate(http, operation, charge["id"], operation),
        ["capture", "void"],
    )
    assert statuses == [200, 422]
    stats = sandbox.stats()
    assert stats["captures_total"] + stats["voids_total"] == 1


def test_new_tables_are_bounded_by_max_tracked_keys() -> None:
    """With --max-tracked-keys 2 the oldest charge can no longer be refunded (404) and the
    refund tables keep two entries, each drop counted."""
    with SandboxProcess.start(api_key=API_KEY, extra_args=("--max-tracked-keys", "2")) as small:
        with httpx.Client(
            base_url=small.url, headers=small.auth_headers(), timeout=10.0, trust_env=False
        ) as http:
            charges = [manual_charge(http, reference=f"pay-{n}", capture=True) for n in range(3)]
            oldest = operate(http, "refund", charges[0]["id"], "r-0")
            assert_problem(oldest, 404, "charge_not_found")
            for n in (1, 2):
                for attempt in range(2):
                    response = operate(http, "refund", charges[n]["id"], f"r-{n}-{attempt}")
                    assert response.status_code == 201
        assert len(small.refund_listing()) == 2
        stats = small.stats()
        assert stats["refunds_total"] == 4
        assert len(stats["refunds_by_idempotency_key"]) == 2
        assert stats["evicted"]["charges_for_operations"] == 1
        assert stats["evicted"]["refunds_listed"] == 2
        assert stats["evicted"]["refunds_by_idempotency_key"] == 2

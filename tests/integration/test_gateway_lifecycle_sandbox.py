"""
gateway_client's capture, void, refund and lookup_refunds against the real sandbox acquirer,
over HTTP (a `python -m sandbox_acquirer` subprocess): each operation approved, the acquirer's
rule refusals as InvalidRequestError with their `acquirer_code`, each operation with a timeout,
a 500 and a reset after the acquirer committed (ambiguous; the same-key re-send replays, one
operation at the sandbox), 503 twice then success within the retries, and a refund whose
answer was lost found by lookup_refunds. The sandbox's stats count what it recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AmbiguousOutcomeError,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    ConnectionLostError,
    InvalidRequestError,
    Refund,
    RefundRequest,
    ResponseTimeoutError,
    RetryPolicy,
    UpstreamServerError,
    VoidRequest,
)
from tests.support.sandbox import SandboxProcess

HANG_SECONDS = 1.5
#: One attempt, a read timeout well below the sandbox's hang: a timeout after commit shows.
ONE_ATTEMPT = RetryPolicy(max_attempts=1, connect_timeout=1.0, read_timeout=0.5, deadline=5.0)
#: Three attempts with short waits: 503, 503, then the answer.
THREE_ATTEMPTS = RetryPolicy(
    max_attempts=3, backoff_base=0.01, backoff_cap=0.05, connect_timeout=1.0, read_timeout=3.0
)
AMOUNT = 10000


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    with SandboxProcess.start(extra_args=("--hang-seconds", str(HANG_SECONDS))) as process:
        yield process


@pytest.fixture
def client(sandbox: SandboxProcess) -> Iterator[AcquirerClient]:
    sandbox.reset()
    config = AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox")
    with AcquirerClient(config, policy=ONE_ATTEMPT) as acquirer:
        yield acquirer


def authorize(client: AcquirerClient, token: str = "tok_visa", *, manual: bool) -> Authorization:
    """A fresh payment authorised at the sandbox: held (manual) or captured at once."""
    payment = f"pay_{uuid.uuid4().hex[:24]}"
    authorization = client.authorize(
        AuthorizationRequest(
            amount=AMOUNT,
            currency="EUR",
            payment_method=token,
            payment_reference=payment,
            idempotency_key=f"authorize-{payment}",
            capture=not manual,
        )
    )
    assert authorization.approved
    return authorization


def capture_of(charge: Authorization, amount: int | None = None, key: str = "") -> CaptureRequest:
    return CaptureRequest(
        charge.acquirer_reference, amount, key or f"capture-{charge.payment_reference}"
    )


def void_of(charge: Authorization, key: str = "") -> VoidRequest:
    return VoidRequest(charge.acquirer_reference, key or f"void-{charge.payment_reference}")


def refund_of(charge: Authorization, amount: int | None = None) -> RefundRequest:
    reference = f"re_{uuid.uuid4().hex[:24]}"
    return RefundRequest(charge.acquirer_reference, reference, amount, f"refund-{reference}")


# -- each operation approved -------------------------------------------------------------------


def test_a_manual_payment_is_captured_partially_and_refunded_twice(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """authorize(capture=False) holds; capture 8000 of 10000; refunds of 3000 and the rest."""
    held = authorize(client, manual=True)
    assert (held.captured, held.amount_captured, held.voided) == (False, 0, False)
    charge = client.capture(capture_of(held, 8000))
    assert (charge.captured, charge.amount_captured, charge.amount_refunded) == (True, 8000, 0)
    assert charge.captured_at is not None and charge.replayed is False

    first = client.refund(refund_of(charge, 3000))
    rest = client.refund(refund_of(charge))  # no amount: all that remains
    assert (first.status, first.amount, first.currency, first.charge) == (
        "succeeded",
        3000,
        "EUR",
        charge.acquirer_reference,
    )
    assert (rest.status, rest.amount) == ("succeeded", 5000)
    assert first.acquirer_reference.startswith("re_") and rest.failure_code is None

    (now,) = client.lookup(held.payment_reference)
    assert (now.amount_captured, now.amount_refunded) == (8000, 8000)
    assert client.lookup_refunds(first.refund_reference) == [first]
    stats = sandbox.stats()
    assert (stats["captures_total"], stats["refunds_total"]) == (1, 2)


def test_a_held_payment_is_voided(client: AcquirerClient, sandbox: SandboxProcess) -> None:
    held = authorize(client, manual=True)
    charge = client.void(void_of(held))
    assert (charge.voided, charge.captured, charge.amount_captured) == (True, False, 0)
    assert charge.voided_at is not None
    assert sandbox.stats()["voids_total"] == 1


def test_a_refused_refund_is_a_value(client: AcquirerClient, sandbox: SandboxProcess) -> None:
    """tok_refund_decline: the refund is recorded failed with do_not_honor, not raised."""
    charge = authorize(client, "tok_refund_decline", manual=False)
    refund = client.refund(refund_of(charge, 1000))
    assert (refund.status, refund.failure_code) == ("failed", "do_not_honor")
    (now,) = client.lookup(charge.payment_reference)
    assert now.amount_refunded == 0


# -- the acquirer's rules --------------------------------------------------------------------

Refusal = Callable[[AcquirerClient], Any]


def _capture_twice(client: AcquirerClient) -> None:
    held = authorize(client, manual=True)
    client.capture(capture_of(held))
    client.capture(capture_of(held, key=f"other-{uuid.uuid4()}"))


def _void_captured(client: AcquirerClient) -> None:
    client.void(void_of(authorize(client, manual=False)))


def _capture_voided(client: AcquirerClient) -> None:
    held = authorize(client, manual=True)
    client.void(void_of(held))
    client.capture(capture_of(held))


def _capture_declined(client: AcquirerClient) -> None:
    payment = f"pay_{uuid.uuid4().hex[:24]}"
    declined = client.authorize(
        AuthorizationRequest(
            amount=AMOUNT,
            currency="EUR",
            payment_method="tok_decline",
            payment_reference=payment,
            idempotency_key=f"authorize-{payment}",
            capture=False,
        )
    )
    assert declined.approved is False
    client.capture(capture_of(declined))


def _capture_too_much(client: AcquirerClient) -> None:
    client.capture(capture_of(authorize(client, manual=True), AMOUNT + 1))


def _refund_uncaptured(client: AcquirerClient) -> None:
    client.refund(refund_of(authorize(client, manual=True), 100))


def _refund_too_much(client: AcquirerClient) -> None:
    charge = authorize(client, manual=False)
    client.refund(refund_of(charge, 6000))
    client.refund(refund_of(charge, 6000))


def _refund_fully_refunded(client: AcquirerClient) -> None:
    charge = authorize(client, manual=False)
    client.refund(refund_of(charge))
    client.refund(refund_of(charge))


def _capture_unknown(client: AcquirerClient) -> None:
    client.capture(CaptureRequest("ch_000000000000000000000000", None, f"capture-{uuid.uuid4()}"))


def _refund_unknown(client: AcquirerClient) -> None:
    client.refund(RefundRequest("ch_000000000000000000000000", "re_x", None, "refund-re_x"))


@pytest.mark.parametrize(
    ("refusal", "status", "code"),
    [
        (_capture_twice, 422, "charge_already_captured"),
        (_void_captured, 422, "charge_already_captured"),
        (_capture_voided, 422, "charge_already_voided"),
        (_capture_declined, 422, "charge_declined"),
        (_capture_too_much, 422, "amount_exceeds_capturable"),
        (_refund_uncaptured, 422, "charge_not_captured"),
        (_refund_too_much, 422, "amount_exceeds_refundable"),
        (_refund_fully_refunded, 422, "charge_already_refunded"),
        (_capture_unknown, 404, "charge_not_found"),
        (_refund_unknown, 404, "charge_not_found"),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)).strip("_"),
)
def test_a_rule_refusal_is_permanent_with_its_code(
    sandbox: SandboxProcess, refusal: Refusal, status: int, code: str
) -> None:
    """The acquirer's 404/422 refusals: InvalidRequestError, acquirer_code, never retried."""
    sandbox.reset()
    config = AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox")
    with (
        AcquirerClient(config, policy=THREE_ATTEMPTS) as client,
        pytest.raises(InvalidRequestError) as info,
    ):
        refusal(client)
    assert (info.value.status_code, info.value.acquirer_code, info.value.attempts) == (
        status,
        code,
        1,
    )


# -- faults after the acquirer committed -----------------------------------------------------


Write = CaptureRequest | VoidRequest | RefundRequest


def write_for(client: AcquirerClient, operation: str, token: str) -> Write:
    """A fresh payment with `token`, ready for `operation`: captured for a refund, else held."""
    if operation == "refund":
        return refund_of(authorize(client, token, manual=False), 2500)
    held = authorize(client, token, manual=True)
    return capture_of(held, 7000) if operation == "capture" else void_of(held)


def send(client: AcquirerClient, request: Write, policy: RetryPolicy) -> Authorization | Refund:
    if isinstance(request, CaptureRequest):
        return client.capture(request, policy=policy)
    if isinstance(request, VoidRequest):
        return client.void(request, policy=policy)
    return client.refund(request, policy=policy)


def assert_applied(result: Authorization | Refund, operation: str) -> None:
    if isinstance(result, Refund):
        assert (result.status, result.amount) == ("succeeded", 2500)
    elif operation == "capture":
        assert (result.captured, result.amount_captured) == (True, 7000)
    else:
        assert (result.voided, result.captured) == (True, False)


OPERATIONS = ["capture", "void", "refund"]
FAULTS = [
    ("timeout_after_commit", ResponseTimeoutError),
    ("500_after_commit", UpstreamServerError),
    ("reset_after_commit", ConnectionLostError),
]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(("fault", "error_class"), FAULTS, ids=[fault for fault, _ in FAULTS])
def test_a_fault_after_commit_is_ambiguous_and_the_same_key_replays(
    client: AcquirerClient,
    sandbox: SandboxProcess,
    operation: str,
    fault: str,
    error_class: type[AmbiguousOutcomeError],
) -> None:
    """The acquirer applied it but we got no answer: ambiguous; a re-send replays it, once."""
    request = write_for(client, operation, f"tok_{operation}_{fault}")
    key = request.idempotency_key
    with pytest.raises(error_class) as info:
        send(client, request, ONE_ATTEMPT)
    assert (info.value.operation, info.value.idempotency_key) == (operation, key)

    replay = send(client, request, ONE_ATTEMPT)
    assert replay.replayed is True
    assert_applied(replay, operation)
    stats = sandbox.stats()
    assert stats[f"{operation}s_total"] == 1
    assert stats[f"{operation}s_by_idempotency_key"] == {key: 1}
    assert stats["requests_by_idempotency_key"][key] == 2


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_client_itself_resends_an_ambiguous_write_with_its_key(
    client: AcquirerClient, sandbox: SandboxProcess, operation: str
) -> None:
    """With retries: a 500 after commit, then the replay, inside one call; one operation."""
    request = write_for(client, operation, f"tok_{operation}_500_after_commit")
    result = send(client, request, THREE_ATTEMPTS)
    assert (result.replayed, result.attempts) == (True, 2)
    assert_applied(result, operation)
    assert sandbox.stats()[f"{operation}s_by_idempotency_key"] == {request.idempotency_key: 1}


# -- certainly not applied, then the answer --------------------------------------------------


@pytest.mark.parametrize("operation", OPERATIONS)
def test_503_twice_then_success_within_the_retries(
    client: AcquirerClient, sandbox: SandboxProcess, operation: str
) -> None:
    """tok_<operation>_fail_503_2: two 503s (nothing recorded), then applied: one call."""
    request = write_for(client, operation, f"tok_{operation}_fail_503_2")
    result = send(client, request, THREE_ATTEMPTS)
    assert (result.attempts, result.replayed) == (3, False)
    assert_applied(result, operation)
    stats = sandbox.stats()
    assert stats["requests_by_idempotency_key"][request.idempotency_key] == 3
    assert stats[f"{operation}s_by_idempotency_key"] == {request.idempotency_key: 1}


# -- a lost refund answer --------------------------------------------------------------------


def test_lookup_refunds_finds_a_refund_whose_answer_was_lost(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """Timeout after commit: ambiguous; GET /refunds?reference= shows it succeeded, once."""
    charge = authorize(client, "tok_refund_timeout_after_commit", manual=False)
    request = refund_of(charge, 4000)
    with pytest.raises(ResponseTimeoutError):
        client.refund(request)
    (found,) = client.lookup_refunds(request.refund_reference, policy=THREE_ATTEMPTS)
    assert (found.status, found.amount, found.charge, found.refund_reference) == (
        "succeeded",
        4000,
        charge.acquirer_reference,
        request.refund_reference,
    )
    assert client.lookup_refunds(f"re_{uuid.uuid4().hex[:24]}") == []
    (now,) = client.lookup(charge.payment_reference)
    assert now.amount_refunded == 4000
    assert sandbox.stats()["refunds_total"] == 1

#!/usr/bin/env python3
"""``make demo``: the payment service against an acquirer that fails, over real HTTP.

With ``make run`` running in another terminal (API on 127.0.0.1:8000, sandbox acquirer on
127.0.0.1:8090), this sends real ``POST /payments`` requests through the public API, one
scenario at a time, and prints for each one the request, the answer (status, payment status,
what the merchant client made of it: result or error class, ``retry_after``, replayed) and what
the sandbox acquirer saw (attempts with the payment's acquirer idempotency key, what they were
answered, charges recorded).

The merchant side is ``merchant_client``: with one attempt per call for the scenarios that
compare the service's answer with docs/api.md's table, and with its defaults (retries as the
contract allows) where the client's own behaviour is the point (a concurrent duplicate that
waits ``Retry-After`` and returns the replay; ``wait_until_final`` for a lost refund).

It hard-codes none of today's outcomes. For the acquirer-driven scenarios the expectation is
derived from the code, then compared with what happened:

1. the sandbox's own scenario code (``sandbox_acquirer.scenarios``) says what attempt number
   *n* of the token gets (a 503, a reset, a hang, the charge, a replay);
2. the sandbox's stats say how many attempts the service actually made;
3. the gateway client's classifier (``gateway_client.classify``) turns each attempt's outcome
   into its error class (retryable, ambiguous, permanent) or a result;
4. the README's API contract maps that to the documented answer (201, 202, 502 or 503 and the
   payment's status).

So today, with a client that makes one attempt, "503 twice, then success" shows one attempt
and the documented ``503 acquirer_unavailable``; once the client retries, the same scenario
shows three attempts and ``201 succeeded``, and the demo still reports "as documented". The
idempotency scenarios (replay, concurrent duplicate, changed request) compare with the
idempotency rules (docs/api.md).

With two acquirers (``make run``'s alpha on :8090 and beta on :8091), the last two steps show
an ambiguous payment staying at alpha (every attempt a timeout: ``202``, nothing sent to beta,
reconciled at alpha) and an outage of alpha absorbed by beta (``503`` before processing:
certainly not applied, so ``201`` at beta), each checked on both sandboxes' stats.

Usage::

    .venv/bin/python scripts/demo.py [--api URL] [--sandbox URL] [--beta-sandbox URL]
        [--api-key KEY]

Without ``--api-key`` (or ``$API_KEY``) it creates a merchant key with
``manage.py create_merchant demo --if-exists=new-key``. Exit status: 0 when every scenario
behaved as documented, 1 when one did not, 2 when the API or the sandbox is not reachable.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from django.contrib.admin.utils import quote  # noqa: E402 - the admin's own escaping of ids

from gateway_client.classify import classify_exception, classify_status  # noqa: E402
from gateway_client.errors import (  # noqa: E402
    AmbiguousOutcomeError,
    GatewayError,
    PermanentError,
    RetryableError,
)
from merchant_client import (  # noqa: E402
    DEFAULT_POLICY,
    IdempotencyKeyReused,
    MerchantClient,
    Pending,
    ProblemError,
    Refund,
    TransportError,
)
from sandbox_acquirer.faults import PROBLEMS  # noqa: E402
from sandbox_acquirer.scenarios import ScenarioSettings, resolve_scenario  # noqa: E402
from scripts.demo_stripe import stripe_payment  # noqa: E402
from scripts.demo_webhooks import webhook_after_reconciliation  # noqa: E402

#: The README's API contract: what the service answers for each kind of acquirer outcome.
DOCUMENTED = {
    "approved": (201, "succeeded"),
    "declined": (201, "declined"),
    "ambiguous": (202, "processing"),
    "not_sent": (503, "failed"),
    "rejected": (502, "failed"),
}
DOCUMENTED_CODES = {503: "acquirer_unavailable", 502: "acquirer_error"}
#: The answers that must say when to come back (a valid Retry-After, read by the client).
WAIT_STATUSES = (202, 503)
#: The idempotency rules (docs/api.md): answers stored for the key (and replayed); a 400, 401, 409,
#: 422 or 503 is not stored, and the key stays free.
STORED_STATUSES = (201, 202, 502)


# -- expectations from the code -----------------------------------------------------------------


def attempt_outcome(token: str, attempt: int, read_timeout: float) -> tuple[str, Any]:
    """What attempt number ``attempt`` (1-based) of ``token`` gets from the sandbox.

    Returns ``("result", "approved"|"declined")``, ``("status", (status, headers, code))`` or
    ``("exception", httpx exception)``, read from the sandbox's scenario code.
    """
    scenario = resolve_scenario(token, ScenarioSettings())
    failure = scenario.failure
    if failure is not None and attempt <= scenario.fail_attempts:
        if failure.kind == "status":
            assert failure.status is not None
            headers = {"Retry-After": "1"} if failure.retry_after_seconds is not None else {}
            return "status", (failure.status, headers, PROBLEMS[failure.status][0])
        return "exception", _connection_error(failure.kind)
    first_processed = scenario.fail_attempts + 1 if failure is not None else 1
    if attempt == first_processed:  # later attempts get the stored charge replayed at once
        if scenario.hold_key_seconds + scenario.reply_delay_seconds > read_timeout:
            return "exception", httpx.ReadTimeout("timed out")
        if scenario.reply == "server_error":
            return "status", (500, {}, "api_error")
        if scenario.reply in ("reset", "close"):
            return "exception", _connection_error(scenario.reply)
    return "result", scenario.status


def _connection_error(kind: str) -> Exception:
    # What httpx raises for a reset (RST) and for a close without an answer (FIN).
    if kind == "close":
        return httpx.RemoteProtocolError("Server disconnected without sending a response.")
    return httpx.ReadError("[Errno 104] Connection reset by peer")


def outcome_category(kind: str, value: Any) -> tuple[str, str]:
    """(category, label) of one attempt: a result, or the gateway client's error class."""
    if kind == "result":
        return value, value
    if kind == "status":
        status, headers, code = value
        error = classify_status(status, headers=headers, code=code)
        label = f"HTTP {status}"
    else:
        error = classify_exception(value)
        label = type(value).__name__
    assert error is not None and issubclass(error, GatewayError)
    if issubclass(error, RetryableError):
        return "not_sent", f"{label} -> {error.__name__} (retryable)"
    if issubclass(error, AmbiguousOutcomeError):
        return "ambiguous", f"{label} -> {error.__name__} (ambiguous)"
    assert issubclass(error, PermanentError)
    return "rejected", f"{label} -> {error.__name__} (permanent)"


def expected_for(token: str, attempts: int, read_timeout: float) -> tuple[tuple[int, str], str]:
    """The documented (status, payment status) after ``attempts`` attempts, and why.

    Follows gateway_client/errors.py: a call ends with its last attempt's outcome, except that
    once any attempt was ambiguous the whole call is ambiguous (unless it ended in a result).
    """
    if attempts == 0:
        return DOCUMENTED["not_sent"], "no attempt reached the acquirer -> not sent"
    outcomes = [
        outcome_category(*attempt_outcome(token, n, read_timeout)) for n in range(1, attempts + 1)
    ]
    category, _label = outcomes[-1]
    if category not in ("approved", "declined") and any(c == "ambiguous" for c, _ in outcomes):
        category = "ambiguous"
    why = ", ".join(f"#{n} {text}" for n, (_, text) in enumerate(outcomes, 1))
    return DOCUMENTED[category], why


# -- talking to the service and the sandbox -----------------------------------------------------


@dataclass
class Seen:
    """What the sandbox saw between two stats snapshots, for one acquirer key."""

    key: str | None
    attempts: int
    charges: int
    answers: dict[str, int] = field(default_factory=dict)
    #: What the records are: charges for an authorization, captures or refunds otherwise.
    records: str = "charges"

    def describe(self) -> str:
        if self.key is None:
            return "no request reached the sandbox"
        answers = ", ".join(f"{label} x{count}" for label, count in self.answers.items())
        still_open = self.attempts - sum(self.answers.values())
        if still_open > 0:  # a held request is counted once its answer is written
            answers += f"{', ' if answers else ''}{still_open} still open"
        plural = "s" if self.attempts != 1 else ""
        return (
            f"{self.attempts} attempt{plural} with {self.key} (answered: {answers or '-'}); "
            f"{self.records} for that key: {self.charges}"
        )


@dataclass
class Answer:
    """What the merchant client returned for one call, as the demo prints and checks it.

    ``status_code``: the answer's HTTP status (0 when none arrived); ``kind``: ``payment``,
    ``refund``, ``problem`` or ``none``; ``data``: the object's fields (or the problem
    document); ``code``: the problem's code (or the transport error's class); ``retry_after``,
    ``replayed`` and ``attempts`` as the client read them; ``result``: the typed value or error.
    """

    status_code: int
    kind: str
    data: dict[str, Any]
    code: str | None = None
    retry_after: float | None = None
    replayed: bool = False
    attempts: int = 1
    result: Any = None

    @property
    def id(self) -> str | None:
        return self.data.get("id") if self.kind in ("payment", "refund") else None

    @property
    def status(self) -> str | None:
        return self.data.get("status") if self.kind in ("payment", "refund") else None


def answer_of(call: Callable[[], Any]) -> Answer:
    """Run one merchant-client call and describe its result or error as an :class:`Answer`."""
    try:
        result = call()
    except ProblemError as error:
        return Answer(
            error.status_code, "problem", error.problem, error.code, error.retry_after,
            error.replayed, error.attempts, error,
        )  # fmt: skip
    except TransportError as error:
        return Answer(
            0, "none", {}, type(error).__name__, error.retry_after, False, error.attempts, error
        )
    pending = isinstance(result, Pending)
    value = result.object if pending else result
    data = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.compare}
    return Answer(
        202 if pending else value.status_code,
        "refund" if isinstance(value, Refund) else "payment",
        data,
        retry_after=result.retry_after if pending else None,
        replayed=result.replayed,
        attempts=result.attempts,
        result=result,
    )


class Demo:
    def __init__(
        self,
        api: str,
        sandbox: str,
        api_key: str,
        read_timeout: float,
        beta: str = "http://127.0.0.1:8091",
        breaker_open_seconds: float = 30.0,
        localstripe: str = "http://127.0.0.1:8092",
    ) -> None:
        # The merchant side is merchant_client. One attempt per call shows the service's answer
        # to each request (the scenarios compare it with docs/api.md's table); the retrying
        # client (its defaults) shows what a merchant gets when the client follows the contract.
        self.api_url, self.api_key = api, api_key
        self.client = MerchantClient(api, api_key, policy=DEFAULT_POLICY.replace(max_attempts=1))
        self.retrying = MerchantClient(api, api_key)
        self.sandbox = httpx.Client(base_url=sandbox, timeout=10.0, trust_env=False)
        # The second acquirer of make run (beta, :8091): where alpha's certain failures go.
        self.beta = httpx.Client(base_url=beta, timeout=10.0, trust_env=False)
        self.read_timeout = read_timeout
        self.localstripe = localstripe  # make run's third acquirer, stripe (localstripe)
        self.breaker_open_seconds = breaker_open_seconds
        self.run_id = uuid.uuid4().hex[:6]
        self.results: list[tuple[str, bool]] = []
        self.number = 0

    # -- helpers ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return self.sandbox.get("/_sandbox/stats").json()

    def post(self, key: str, body: dict[str, Any], client: MerchantClient | None = None) -> Answer:
        """``POST /payments`` through the merchant client, with the idempotency key ``key``."""
        merchant = client or self.client
        fields = {
            k: v for k, v in body.items() if k not in ("amount", "currency", "payment_method")
        }
        return answer_of(
            lambda: merchant.create_payment(
                body["amount"], body["currency"], body["payment_method"], idempotency_key=key,
                **fields,
            )
        )  # fmt: skip

    def body(self, token: str, name: str, amount: int = 1999) -> dict[str, Any]:
        return {
            "amount": amount,
            "currency": "EUR",
            "payment_method": token,
            "reference": f"demo-{self.run_id}-{name}",
        }

    def seen(
        self,
        before: dict[str, Any],
        after: dict[str, Any],
        key: str | None,
        kind: str = "authorize",
    ) -> Seen:
        """Attempts, answers and records (charges, or the ``kind`` operation's: captures,
        refunds) for the acquirer key ``<kind>-...`` since ``before``."""
        old = before.get("requests_by_idempotency_key", {})
        new = after.get("requests_by_idempotency_key", {})
        grown = [k for k, v in new.items() if v > old.get(k, 0) and k.startswith(f"{kind}-")]
        if key is None and grown:
            key = grown[-1]
        if key is None:
            return Seen(None, 0, 0)
        answers: dict[str, int] = {}
        for table in ("requests_by_status", "requests_unanswered"):
            for label, count in after.get(table, {}).items():
                delta = count - before.get(table, {}).get(label, 0)
                if delta > 0:
                    answers[label if table == "requests_by_status" else f"no answer ({label})"] = (
                        delta
                    )
        records = "charges" if kind == "authorize" else f"{kind}s"
        return Seen(
            key=key,
            attempts=new.get(key, 0) - old.get(key, 0),
            charges=after.get(f"{records}_by_idempotency_key", {}).get(key, 0),
            answers=answers,
            records=records,
        )

    def payment_status(self, answer: Answer, seen: Seen) -> tuple[str | None, str]:
        """The payment's id and status: from the answer, else looked up by its acquirer key."""
        if answer.kind == "payment":
            return answer.id, answer.data["status"]
        payment_id = answer.data.get("payment_id") if answer.kind == "problem" else None
        if payment_id is None and seen.key and seen.key.startswith("authorize-"):
            payment_id = seen.key.removeprefix("authorize-")
        if payment_id:
            looked_up = answer_of(lambda: self.client.get_payment(payment_id))
            if looked_up.kind == "payment":
                return payment_id, looked_up.data["status"]
        return payment_id, "-"

    # -- printing -----------------------------------------------------------------------

    def heading(self, title: str) -> None:
        self.number += 1
        print(f"\n== {self.number}. {title} " + "=" * max(3, 66 - len(title)))

    @staticmethod
    def show_request(
        key: str, body: dict[str, Any], note: str = "", path: str = "/payments"
    ) -> None:
        print(f"request   POST {path}  Idempotency-Key: {key}")
        print(f"          {json.dumps(body)}{note}")

    @staticmethod
    def show_answer(answer: Answer, payment: str | None = None, label: str = "payment") -> None:
        parts = [str(answer.status_code or "no answer")]
        if answer.code:
            parts.append(answer.code)
        if payment:
            parts.append(f"{label} {payment}")
        print(f"answer    {'  '.join(parts)}")
        seen = [f"{type(answer.result).__name__}"]
        if answer.retry_after is not None:
            seen.append(f"retry_after {answer.retry_after:g} s")
        if answer.replayed:
            seen.append("replayed (Idempotent-Replayed: true)")
        print(f"client    {', '.join(seen)}")

    def verdict(self, title: str, ok: bool, expected: str) -> None:
        print(f"expected  {expected}")
        print(f"result    {'as documented' if ok else 'DIFFERS from the documentation'}")
        self.results.append((title, ok))

    # -- scenarios ------------------------------------------------------------------------

    def create_shown(self, key: str, body: dict[str, Any]) -> tuple[Answer, Seen, str | None, str]:
        """``POST /payments``, printed with its answer and what the sandbox saw; returns the
        answer, what the sandbox saw, the payment's id and status."""
        self.show_request(key, body)
        before = self.stats()
        answer = self.post(key, body)
        seen = self.seen(before, self.stats(), None)
        payment_id, status = self.payment_status(answer, seen)
        self.show_answer(answer, f"{payment_id} {status}" if payment_id else None)
        print(f"sandbox   {seen.describe()}")
        return answer, seen, payment_id, status

    def acquirer_scenario(self, title: str, token: str, *, merchant_retry: bool = False) -> Answer:
        """One payment whose acquirer behaviour is chosen by ``token``."""
        self.heading(title)
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body(token, str(self.number))
        answer, seen, payment_id, status = self.create_shown(key, body)
        total_attempts = seen.attempts
        ok = self.compare(answer, status, token, total_attempts)
        if merchant_retry and seen.key:
            print("then      the merchant retries the same request (same Idempotency-Key)")
            before = self.stats()
            retry = self.post(key, body)
            again = self.seen(before, self.stats(), seen.key)
            total_attempts += again.attempts
            payment_id, status = self.payment_status(retry, seen)
            self.show_answer(retry, f"{payment_id} {status}" if payment_id else None)
            print(f"sandbox   {again.describe()}")
            ok = self.compare(retry, status, token, total_attempts) and ok
            answer = retry
        return answer

    def compare(self, answer: Answer, payment_status: str, token: str, attempts: int) -> bool:
        (status, expected_payment), why = expected_for(token, attempts, self.read_timeout)
        code = DOCUMENTED_CODES.get(status)
        text = f"{status}{' ' + code if code else ''}, payment {expected_payment}"
        print(f"because   {why}")
        ok = (
            answer.status_code == status
            and payment_status == expected_payment
            and (code is None or answer.code == code)
        )
        if status in WAIT_STATUSES and answer.retry_after is None:
            print("note      no valid Retry-After (delay-seconds or an HTTP-date) on the answer")
            ok = False
        self.verdict(f"{self.number}", ok, text)
        return ok

    def replay(self, first_key: str, first_body: dict[str, Any], first: Answer) -> None:
        self.heading("a replay: the same request again")
        self.show_request(first_key, first_body, "  (the request of scenario 1)")
        before = self.stats()
        answer = self.post(first_key, first_body)
        seen = self.seen(before, self.stats(), None)
        self.show_answer(answer)
        print(f"sandbox   {seen.describe()}")
        if first.status_code in STORED_STATUSES:
            ok = (
                answer.status_code == first.status_code
                and answer.data == first.data
                and answer.replayed
                and seen.attempts == 0
            )
            expected = (
                f"{first.status_code} again, the same payment (every field), replayed, "
                "no acquirer call"
            )
        else:
            ok = not answer.replayed
            expected = (
                f"not a replay: a {first.status_code} is not stored, so the key was free and "
                "this ran as a new request"
            )
        self.verdict("replay", ok, expected)

    def concurrent_duplicate(self) -> None:
        self.heading("a concurrent duplicate (the acquirer takes 2 s)")
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body("tok_slow_2000", str(self.number))
        self.show_request(key, body, "  x2, at the same time")
        before = self.stats()
        answers: list[Answer] = []
        lock = threading.Lock()

        def send() -> None:
            answer = self.post(key, body)
            with lock:
                answers.append(answer)

        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seen = self.seen(before, self.stats(), None)
        answers.sort(key=lambda a: a.status_code)
        for answer in answers:
            self.show_answer(answer)
        print(f"sandbox   {seen.describe()}")
        conflict = answers[-1]
        ok = (
            [a.status_code for a in answers] == [201, 409]
            and conflict.code == "idempotency_key_in_use"
            and conflict.retry_after == 1.0
            and seen.attempts == 1
            and seen.charges == 1
        )
        self.verdict(
            "concurrent",
            ok,
            "one 201, one 409 idempotency_key_in_use with Retry-After: 1 at once; one charge",
        )

    def concurrent_duplicate_retried(self) -> None:
        self.heading("the same duplicate, the merchant client retrying (its defaults)")
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body("tok_slow_2000", str(self.number))
        self.show_request(key, body, "  x2: the second sent once the first holds the key")
        before = self.stats()
        first: list[Answer] = []
        thread = threading.Thread(target=lambda: first.append(self.post(key, body, self.retrying)))
        thread.start()
        time.sleep(0.5)  # the first request has claimed the key by now
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            time.sleep(seconds)

        with MerchantClient(self.api_url, self.api_key, sleep=sleep) as other:
            second = self.post(key, body, other)
        thread.join()
        seen = self.seen(before, self.stats(), None)
        self.show_answer(first[0], f"{first[0].id} {first[0].status}")
        self.show_answer(second, f"{second.id} {second.status}")
        print(
            f"client    the second: {second.attempts} attempts, slept "
            + ", ".join(f"{w:.2f} s" for w in waits)
            + " (409 idempotency_key_in_use: Retry-After 1 s + jitter)"
        )
        print(f"sandbox   {seen.describe()}")
        ok = (
            first[0].status_code == 201
            and second.status_code == 201
            and second.replayed
            and second.id == first[0].id
            and bool(waits)
            and all(w >= 1.0 for w in waits)
            and seen.charges == 1
        )
        self.verdict(
            "concurrent, retried",
            ok,
            "the second waits Retry-After (1 s) and returns the first one's 201, replayed; "
            "one charge",
        )

    def changed_request(self, first_key: str, first_body: dict[str, Any], first: Answer) -> None:
        self.heading("a changed request under the same key")
        body = {**first_body, "amount": first_body["amount"] + 100}
        self.show_request(first_key, body, "  (scenario 1's key, another amount)")
        before = self.stats()
        answer = self.post(first_key, body)
        seen = self.seen(before, self.stats(), None)
        self.show_answer(answer)
        print(f"sandbox   {seen.describe()}")
        if first.status_code in STORED_STATUSES:
            ok = (
                answer.status_code == 422
                and isinstance(answer.result, IdempotencyKeyReused)
                and seen.attempts == 0
            )
            expected = "422 idempotency_key_reused (IdempotencyKeyReused), no acquirer call"
        else:
            ok = answer.status_code != 422
            expected = (
                f"not a 422: scenario 1's {first.status_code} was not stored, so the key was free"
            )
        self.verdict("changed", ok, expected)

    # -- the payment lifecycle: capture and refunds -----------------------------------------

    def operation(
        self, path: str, body: dict[str, Any], kind: str, key: str | None = None
    ) -> tuple[str, Answer, Seen]:
        """``POST path`` (a capture or a refund) with its own key: printed, with what the
        sandbox saw for the operation's acquirer key (``capture-...``, ``refund-...``)."""
        key = key or f"demo-{self.run_id}-{self.number}-{kind}-{uuid.uuid4().hex[:4]}"
        self.show_request(key, body, path=path)
        payment_id = path.split("/")[2]
        before = self.stats()
        if kind == "capture":
            answer = answer_of(lambda: self.client.capture(payment_id, idempotency_key=key, **body))
        else:
            answer = answer_of(lambda: self.client.refund(payment_id, idempotency_key=key, **body))
        seen = self.seen(before, self.stats(), None, kind)
        label, what = "payment", None
        if answer.kind == "refund":
            label, what = "refund", f"{answer.id} {answer.status} amount {answer.data['amount']}"
        elif answer.kind == "payment":
            what = f"{answer.id} {answer.status} amount_captured {answer.data['amount_captured']}"
        self.show_answer(answer, what, label)
        print(f"sandbox   {seen.describe()}")
        return key, answer, seen

    def manual_payment(self) -> tuple[str | None, int]:
        self.heading("a manual payment: authorized only (capture_method manual)")
        key = f"demo-{self.run_id}-{self.number}"
        body = {**self.body("tok_visa", str(self.number), amount=2000), "capture_method": "manual"}
        answer, seen, payment_id, status = self.create_shown(key, body)
        ok = answer.status_code == 201 and status == "requires_capture" and seen.charges == 1
        self.verdict("manual", ok, "201, payment requires_capture, amount_captured 0; one charge")
        return (payment_id if ok else None), body["amount"]

    def partial_capture(self, payment_id: str, amount: int) -> bool:
        self.heading("a partial capture (the rest of the authorization is released)")
        captured = amount * 3 // 4
        _, answer, seen = self.operation(
            f"/payments/{payment_id}/capture", {"amount": captured}, "capture"
        )
        ok = (
            answer.status_code == 200
            and (answer.status, answer.data.get("amount_captured")) == ("succeeded", captured)
            and (seen.attempts, seen.charges) == (1, 1)
        )
        self.verdict(
            "capture", ok, f"200, payment succeeded, amount_captured {captured}; one capture"
        )
        return ok

    def two_refunds(self, payment_id: str) -> None:
        self.heading("two partial refunds of the captured amount")
        captured = self.client.get_payment(payment_id).amount_captured
        amounts = (captured // 3, captured // 5)
        ok = True
        for amount in amounts:
            _, answer, seen = self.operation(
                f"/payments/{payment_id}/refunds", {"amount": amount}, "refund"
            )
            ok = ok and answer.status_code == 201 and answer.status == "succeeded"
            ok = (
                ok
                and answer.data.get("amount") == amount
                and (seen.attempts, seen.charges) == (1, 1)
            )
        payment = self.client.get_payment(payment_id)
        print(
            f"then      GET /payments/{payment_id}: {payment.status}, amount_captured "
            f"{payment.amount_captured}, amount_refunded {payment.amount_refunded}"
        )
        ok = ok and payment.amount_refunded == sum(amounts)
        self.verdict(
            "refunds",
            ok,
            f"201 refund succeeded twice; amount_refunded {sum(amounts)}; one refund per key",
        )

    def lost_refund(self, poll_seconds: float = 60.0) -> None:
        self.heading("a refund whose answer was lost (500 after the acquirer recorded it)")
        method = "tok_refund_500_after_commit"
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body(method, str(self.number))
        created = self.post(key, body)
        payment_id = created.id if created.status_code == 201 else None
        print(f"setup     a payment with {method}: {created.status_code} {payment_id}")
        if payment_id is None:
            self.verdict("lost refund", False, "a 201 payment to refund")
            return
        # The token loses the first attempt's answer; an outage of POST /refunds after commit
        # loses the gateway client's retries' answers too (same key: the sandbox replays the
        # refund it recorded, then answers 500 again), so the service cannot know in-request.
        outage = {"duration_seconds": 5, "failure": 500, "phase": "after_commit"}
        self.sandbox.post(
            "/_sandbox/conditions/outage", json={**outage, "endpoints": ["POST /refunds"]}
        ).raise_for_status()
        print(
            "setup     the sandbox answers every POST /refunds 500 after recording it, for 5 s "
            "(the token's fault, and the client's retries too)"
        )
        try:
            refund_key, first, seen = self.operation(
                f"/payments/{payment_id}/refunds", {"amount": 700}, "refund"
            )
        finally:
            self.sandbox.delete("/_sandbox/conditions/outage")
        ok = (
            first.status_code == 202
            and first.status == "pending"
            and first.retry_after is not None
            and seen.charges == 1
        )
        print(f"then      client.wait_until_final(pending, timeout={poll_seconds:g}): polls "
              f"GET /refunds/{first.id} after Retry-After, with backoff")  # fmt: skip
        started = time.monotonic()
        status = first.status
        if isinstance(first.result, Pending):
            final = answer_of(lambda: self.client.wait_until_final(first.result, poll_seconds))
            status = final.status
        waited = time.monotonic() - started
        print(f"answer    200  refund {first.id} {status} (after {waited:.0f} s)")
        print("then      the merchant retries the same request (same Idempotency-Key)")
        _, replay, again = self.operation(
            f"/payments/{payment_id}/refunds", {"amount": 700}, "refund", key=refund_key
        )
        ok = (
            ok
            and status == "succeeded"
            and replay.status_code == 201
            and replay.status == "succeeded"
            and replay.replayed
            and (again.attempts, again.charges) in ((0, 0), (0, 1))
            and self.stats().get("refunds_by_idempotency_key", {}).get(seen.key, 0) == 1
        )
        self.verdict(
            "lost refund",
            ok,
            "202, refund pending with Retry-After; reconciliation resolves it succeeded (one "
            "refund at the acquirer); the retry replays 201 succeeded, no acquirer call",
        )

    # -- two acquirers: failover only when certain ------------------------------------------

    def beta_stats(self) -> dict[str, Any] | None:
        """beta's stats, or None when no beta sandbox answers."""
        try:
            return self.beta.get("/_sandbox/stats").json()
        except (httpx.HTTPError, ValueError):
            return None

    def beta_start(self, heading: str, check: str, expected: str) -> dict[str, Any] | None:
        """Print the step's heading; return beta's stats now, or None (the check counted as
        failed, with a hint) when no beta sandbox answers."""
        self.heading(heading)
        stats = self.beta_stats()
        if stats is None:
            print(f"setup     no beta sandbox answers at {self.beta.base_url} (make run starts it)")
            self.verdict(check, False, expected)
        return stats

    def breaker_state(self, acquirer: str = "alpha", group: str = "authorize") -> str | None:
        """The acquirer's breaker state for ``group`` as the API's ``/metrics`` reports it
        (``closed``, ``open``, ``half_open``), or None when it does not say."""
        try:
            text = httpx.get(f"{self.api_url.rstrip('/')}/metrics", timeout=5, trust_env=False).text
        except httpx.HTTPError:
            return None
        labels = (f'acquirer="{acquirer}"', f'group="{group}"')
        for line in text.splitlines():
            if line.startswith("payments_acquirer_breaker_state{") and all(
                label in line for label in labels
            ):
                name, _, value = line.rpartition(" ")
                if float(value) == 1.0:
                    return name.split('state="', 1)[1].split('"', 1)[0]
        return None

    def wait_for_alpha(self) -> None:
        """When alpha's ``authorize`` breaker is open (the deliberate failures of the steps
        before add up, or of a demo run just before), wait out its open time
        (``ACQUIRER_BREAKER_OPEN_SECONDS``): the next call is then its probe, and a payment
        meets alpha itself rather than being sent straight to beta. ``/metrics`` shows the
        state as of the last call, so the wait is the whole open time."""
        if self.breaker_state() != "open":
            return
        seconds = self.breaker_open_seconds
        print(f"setup     alpha's authorize breaker is open (failures before this step): waiting "
              f"its open time, {seconds:g} s, so the next call is its probe")  # fmt: skip
        time.sleep(seconds + 1.0)

    def settle_alpha(self) -> None:
        """Before the first step: when a demo run just before left alpha's breaker open or
        half-open (its last steps fail at alpha on purpose), wait out the open time and send
        healthy payments as the breaker's probes (``ACQUIRER_BREAKER_HALF_OPEN_PERMITS``, 5)
        until it is closed, so every step meets alpha itself. Two rounds at most."""
        state = self.breaker_state()
        if state not in ("open", "half_open"):
            return
        print(f"setup     alpha's authorize breaker is {state} (a demo run just before?)")
        probes = 0
        for _round in range(2):
            self.wait_for_alpha()
            for _probe in range(6):
                probes += 1
                self.post(f"demo-{self.run_id}-probe-{probes}", self.body("tok_visa", "probe"))
                if self.breaker_state() == "closed":
                    break
            if self.breaker_state() == "closed":
                break
        print(f"setup     {probes} healthy payments as its probes: alpha's breaker "
              f"{self.breaker_state()}")  # fmt: skip

    def admin_line(self, payment_id: str | None, what: str) -> None:
        if payment_id:
            print(
                f"admin     {self.api_url.rstrip('/')}/admin/payments/payment/"
                f"{quote(payment_id)}/change/ shows {what}"
            )

    def outage_absorbed(self) -> None:
        """alpha answers 503 before processing (its control endpoint): certainly not applied,
        so the payment moves to beta within the request (or, when alpha's breaker has opened,
        starts there with nothing sent to alpha); one charge, at beta."""
        expected = (
            "201 succeeded: alpha certainly did not take it (503 before processing, or its "
            "breaker open and nothing sent), so beta did; no charge at alpha, one at beta"
        )
        title = "alpha down (503 before processing): the payment succeeds at beta"
        beta_before = self.beta_start(title, "failover", expected)
        if beta_before is None:
            return
        self.wait_for_alpha()  # so the payment meets alpha's outage, not its open breaker
        outage = {"duration_seconds": 30, "failure": 503, "endpoints": ["POST /charges"]}
        self.sandbox.post("/_sandbox/conditions/outage", json=outage).raise_for_status()
        print("setup     alpha answers every POST /charges 503 before processing, for 30 s "
              "(POST /_sandbox/conditions/outage)")  # fmt: skip
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body("tok_visa", str(self.number))
        self.show_request(key, body)
        before = self.stats()
        try:
            answer = self.post(key, body)
            after = self.stats()
        finally:
            self.sandbox.delete("/_sandbox/conditions/outage")
        beta_after = self.beta_stats() or {}
        payment_id = answer.id
        self.show_answer(answer, f"{payment_id} {answer.status}" if payment_id else None)
        alpha_seen = self.seen(before, after, None)
        beta_seen = self.seen(beta_before, beta_after, None)
        print(f"alpha     {alpha_seen.describe()}")
        print(f"beta      {beta_seen.describe()}")
        _category, why = outcome_category("status", (503, {}, PROBLEMS[503][0]))
        if alpha_seen.attempts:
            print(f"because   alpha: {why}: certainly not applied -> the next acquirer, with "
                  "its own acquirer idempotency key (docs/api.md)")  # fmt: skip
            moved = beta_seen.key == f"authorize-{payment_id}-beta"
        else:
            print("because   alpha's authorize breaker was open: skipped before anything was "
                  "sent, the payment starts at beta (docs/api.md)")  # fmt: skip
            moved = beta_seen.key == f"authorize-{payment_id}"
        self.admin_line(payment_id, "acquirer beta, and each attempt's acquirer")
        charges = (
            after.get("charges_by_reference", {}).get(payment_id, 0),
            beta_after.get("charges_by_reference", {}).get(payment_id, 0),
        )
        ok = (
            _category == "not_sent"
            and answer.status_code == 201
            and answer.status == "succeeded"
            and moved
            and beta_seen.attempts == 1
            and charges == (0, 1)
        )
        self.verdict("failover", ok, expected)

    def ambiguous_stays(self, poll_seconds: float = 60.0) -> None:
        """alpha holds every request past the read timeout, then processes it: each attempt is
        a timeout (ambiguous), so the payment stays at alpha, 202, never sent to beta;
        reconciliation finds the charge at alpha."""
        expected = (
            "202 processing, nothing sent to beta; reconciliation resolves it succeeded at "
            "alpha; one charge, at alpha"
        )
        title = "alpha hangs past the read timeout: the payment stays at alpha (202)"
        beta_before = self.beta_start(title, "ambiguous stays", expected)
        if beta_before is None:
            return
        self.wait_for_alpha()
        hold_ms = int((self.read_timeout + 1.0) * 1000)
        latency = {"distribution": "fixed", "ms": hold_ms}
        self.sandbox.post("/_sandbox/conditions/latency", json=latency).raise_for_status()
        print(f"setup     alpha holds every request {hold_ms} ms, then processes it (read "
              f"timeout {self.read_timeout:g} s; POST /_sandbox/conditions/latency)")  # fmt: skip
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body("tok_visa", str(self.number))
        self.show_request(key, body)
        before = self.stats()
        try:
            answer = self.post(key, body)
        finally:
            self.sandbox.delete("/_sandbox/conditions/latency")
        payment_id = answer.id
        self.show_answer(answer, f"{payment_id} {answer.status}" if payment_id else None)
        _category, why = outcome_category("exception", httpx.ReadTimeout("timed out"))
        print(f"because   alpha: {why}: it may have charged -> stays, 202, reconciled there, "
              "never sent elsewhere (docs/api.md)")  # fmt: skip
        status = answer.status
        if isinstance(answer.result, Pending):
            print(f"then      client.wait_until_final(pending, timeout={poll_seconds:g}): polls "
                  f"GET /payments/{payment_id} after Retry-After")  # fmt: skip
            started = time.monotonic()
            final = answer_of(lambda: self.client.wait_until_final(answer.result, poll_seconds))
            status = final.status
            print(f"answer    200  payment {payment_id} {status} (after "
                  f"{time.monotonic() - started:.0f} s)")  # fmt: skip
        alpha_seen = self.seen(before, self.stats(), f"authorize-{payment_id}")
        beta_after = self.beta_stats() or {}
        beta_seen = self.seen(beta_before, beta_after, None)
        print(f"alpha     {alpha_seen.describe()}")
        print(f"beta      {beta_seen.describe()}")
        self.admin_line(payment_id, "acquirer alpha, and its reconciliation")
        ok = (
            _category == "ambiguous"
            and answer.status_code == 202
            and answer.status == "processing"
            and answer.retry_after is not None
            and status == "succeeded"
            and alpha_seen.charges == 1
            and beta_seen.key is None
            and beta_after.get("charges_by_reference", {}).get(payment_id, 0) == 0
        )
        self.verdict("ambiguous stays", ok, expected)

    def webhook_step(self) -> None:
        """Webhooks (``scripts/demo_webhooks.py``): a 202 payment's final event arriving."""
        self.heading("webhook after a 202")
        title, ok, expected = webhook_after_reconciliation(
            self.api_url.rstrip("/"),
            str(self.sandbox.base_url).rstrip("/"),
            self.api_key,
        )
        self.verdict(title, ok, expected)

    def stripe_step(self) -> None:
        """The stripe connector (``scripts/demo_stripe.py``): one payment through localstripe."""
        self.heading("a payment through the stripe connector")
        self.verdict(*stripe_payment(self.api_url.rstrip("/"), self.api_key, self.localstripe))

    def run(self) -> int:
        self.settle_alpha()
        first = self.acquirer_scenario("approved", "tok_visa")
        first_key, first_body = f"demo-{self.run_id}-1", self.body("tok_visa", "1")
        self.acquirer_scenario("declined", "tok_decline")
        self.acquirer_scenario("503 twice, then success", "tok_fail_503_2")
        self.acquirer_scenario("429 with Retry-After: 2", "tok_ratelimit_2")
        self.acquirer_scenario("connection reset before commit", "tok_reset_before_commit")
        self.acquirer_scenario("connection reset after commit", "tok_reset_after_commit")
        self.acquirer_scenario(
            "timeout after commit", "tok_timeout_after_commit", merchant_retry=True
        )
        self.replay(first_key, first_body, first)
        self.concurrent_duplicate()
        self.concurrent_duplicate_retried()
        self.changed_request(first_key, first_body, first)
        payment_id, amount = self.manual_payment()
        if payment_id and self.partial_capture(payment_id, amount):
            self.two_refunds(payment_id)
        self.lost_refund()
        self.webhook_step()
        self.ambiguous_stays()
        self.outage_absorbed()
        self.stripe_step()

        failed = [title for title, ok in self.results if not ok]
        print(
            f"\n{len(self.results) - len(failed)} of {len(self.results)} checks as documented"
            + (f"; differing: {', '.join(failed)}" if failed else "")
        )
        return 1 if failed else 0


# -- entry point ---------------------------------------------------------------------------------


def reachable(url: str, path: str) -> bool:
    try:
        return httpx.get(url + path, timeout=3.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def create_api_key(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> str:
    """A fresh key for the merchant ``demo`` (``manage.py create_merchant``, last line)."""
    result = run(
        [sys.executable, "manage.py", "create_merchant", "demo", "--if-exists=new-key"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="the payment API")
    parser.add_argument(
        "--sandbox", default="http://127.0.0.1:8090", help="the sandbox acquirer alpha"
    )
    parser.add_argument(
        "--beta-sandbox", default="http://127.0.0.1:8091", help="the second one, beta"
    )
    parser.add_argument(
        "--localstripe", default="http://127.0.0.1:8092", help="the third acquirer, stripe's"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("API_KEY"),
        help="a merchant API key (default: $API_KEY, else a new key for the merchant 'demo')",
    )
    parser.add_argument(
        "--acquirer-read-timeout",
        type=float,
        default=float(os.environ.get("ACQUIRER_READ_TIMEOUT_SECONDS", "3.0")),
        help="the service's ACQUIRER_READ_TIMEOUT_SECONDS (default 3.0, as documented)",
    )
    parser.add_argument(
        "--breaker-open-seconds",
        type=float,
        default=float(os.environ.get("ACQUIRER_BREAKER_OPEN_SECONDS", "30")),
        help="the service's ACQUIRER_BREAKER_OPEN_SECONDS (default 30, as documented)",
    )
    args = parser.parse_args(argv)
    api, sandbox = args.api.rstrip("/"), args.sandbox.rstrip("/")

    missing = [
        f"the API at {api}" * (not reachable(api, "/healthz")),
        f"the sandbox acquirer at {sandbox}" * (not reachable(sandbox, "/healthz")),
    ]
    missing = [item for item in missing if item]
    if missing:
        print(
            f"Cannot reach {' and '.join(missing)}.\n"
            "Start the service first, in another terminal: make run\n"
            "(or pass --api and --sandbox).",
            file=sys.stderr,
        )
        return 2

    api_key = args.api_key
    if not api_key:
        try:
            api_key = create_api_key()
        except subprocess.CalledProcessError as exc:
            last = "\n".join(exc.stderr.strip().splitlines()[-2:])
            print(
                f"Could not create a merchant API key (manage.py create_merchant):\n{last}\n"
                "Pass --api-key (the key `make run` printed) instead.",
                file=sys.stderr,
            )
            return 2
        print("Created an API key for the merchant 'demo' (manage.py create_merchant).")

    print(f"Payment API {api}   sandbox acquirer {sandbox}")
    print(
        "Each scenario: what we sent, what the service answered, what the acquirer saw, and the\n"
        "answer the README documents for what the acquirer did (derived from the sandbox's\n"
        "scenario code, the attempts it counted and the gateway client's classifier)."
    )
    try:
        conditions = httpx.get(f"{sandbox}/_sandbox/conditions", timeout=3.0, trust_env=False)
        active = {k: v for k, v in conditions.json().items() if v} if conditions.is_success else {}
    except (httpx.HTTPError, ValueError):
        active = {}
    if active:
        print(f"Note: the sandbox has acquirer-wide conditions set: {', '.join(active)}.")
    demo = Demo(
        api,
        sandbox,
        api_key,
        args.acquirer_read_timeout,
        beta=args.beta_sandbox.rstrip("/"),
        breaker_open_seconds=args.breaker_open_seconds,
        localstripe=args.localstripe.rstrip("/"),
    )
    return demo.run()


if __name__ == "__main__":
    sys.exit(main())

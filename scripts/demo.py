#!/usr/bin/env python3
"""``make demo``: the payment service against an acquirer that fails, over real HTTP.

With ``make run`` running in another terminal (API on 127.0.0.1:8000, sandbox acquirer on
127.0.0.1:8090), this sends real ``POST /payments`` requests through the public API, one
scenario at a time, and prints for each one the request, the answer (status, payment status,
the headers that matter) and what the sandbox acquirer saw (attempts with the payment's
acquirer idempotency key, what they were answered, charges recorded).

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
README's idempotency rules.

Usage::

    .venv/bin/python scripts/demo.py [--api URL] [--sandbox URL] [--api-key KEY]

Without ``--api-key`` (or ``$API_KEY``) it creates a merchant key with
``manage.py create_merchant demo --if-exists=new-key``. Exit status: 0 when every scenario
behaved as documented, 1 when one did not, 2 when the API or the sandbox is not reachable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from gateway_client.classify import classify_exception, classify_status  # noqa: E402
from gateway_client.errors import (  # noqa: E402
    AmbiguousOutcomeError,
    GatewayError,
    PermanentError,
    RetryableError,
)
from sandbox_acquirer.faults import PROBLEMS  # noqa: E402
from sandbox_acquirer.scenarios import ScenarioSettings, resolve_scenario  # noqa: E402
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
HEADERS_THAT_MATTER = ("Location", "Retry-After", "Idempotent-Replayed")
#: The README's idempotency rules: answers stored for the key (and replayed); a 400, 401, 409,
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


def valid_retry_after(value: str) -> bool:
    """RFC 9110 section 10.2.3: ``1*DIGIT`` or an HTTP-date (IMF-fixdate, as servers send)."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        return True
    try:
        datetime.strptime(value, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    except ValueError:
        return False
    return True


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


class Demo:
    def __init__(self, api: str, sandbox: str, api_key: str, read_timeout: float) -> None:
        self.api = httpx.Client(
            base_url=api,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(60.0, connect=5.0),
            trust_env=False,
        )
        self.sandbox = httpx.Client(base_url=sandbox, timeout=10.0, trust_env=False)
        self.read_timeout = read_timeout
        self.run_id = uuid.uuid4().hex[:6]
        self.results: list[tuple[str, bool]] = []
        self.number = 0

    # -- helpers ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return self.sandbox.get("/_sandbox/stats").json()

    def post(self, key: str, body: dict[str, Any], client: httpx.Client | None = None):
        return (client or self.api).post("/payments", json=body, headers={"Idempotency-Key": key})

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

    def payment_status(self, response: httpx.Response, seen: Seen) -> tuple[str | None, str]:
        """The payment's id and status: from the answer, else looked up by its acquirer key."""
        try:
            data = response.json()
        except ValueError:
            data = {}
        payment_id = data.get("id") if data.get("object") == "payment" else data.get("payment_id")
        if payment_id is None and seen.key and seen.key.startswith("authorize-"):
            payment_id = seen.key.removeprefix("authorize-")
        if data.get("object") == "payment":
            return payment_id, data["status"]
        if payment_id:
            looked_up = self.api.get(f"/payments/{payment_id}")
            if looked_up.status_code == 200:
                return payment_id, looked_up.json()["status"]
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
    def show_answer(
        response: httpx.Response, payment: str | None = None, label: str = "payment"
    ) -> None:
        headers = "  ".join(
            f"{name}: {response.headers[name]}"
            for name in HEADERS_THAT_MATTER
            if name in response.headers
        )
        try:
            data = response.json()
        except ValueError:
            data = {}
        code = data.get("code") if isinstance(data, dict) else None
        parts = [str(response.status_code)]
        if code:
            parts.append(code)
        if payment:
            parts.append(f"{label} {payment}")
        print(f"answer    {'  '.join(parts)}")
        if headers:
            print(f"          {headers}")

    def verdict(self, title: str, ok: bool, expected: str) -> None:
        print(f"expected  {expected}")
        print(f"result    {'as documented' if ok else 'DIFFERS from the documentation'}")
        self.results.append((title, ok))

    # -- scenarios ------------------------------------------------------------------------

    def create_shown(
        self, key: str, body: dict[str, Any]
    ) -> tuple[httpx.Response, Seen, str | None, str]:
        """``POST /payments``, printed with its answer and what the sandbox saw; returns the
        answer, what the sandbox saw, the payment's id and status."""
        self.show_request(key, body)
        before = self.stats()
        response = self.post(key, body)
        seen = self.seen(before, self.stats(), None)
        payment_id, status = self.payment_status(response, seen)
        self.show_answer(response, f"{payment_id} {status}" if payment_id else None)
        print(f"sandbox   {seen.describe()}")
        return response, seen, payment_id, status

    def acquirer_scenario(
        self, title: str, token: str, *, merchant_retry: bool = False
    ) -> httpx.Response:
        """One payment whose acquirer behaviour is chosen by ``token``."""
        self.heading(title)
        key = f"demo-{self.run_id}-{self.number}"
        body = self.body(token, str(self.number))
        response, seen, payment_id, status = self.create_shown(key, body)
        total_attempts = seen.attempts
        ok = self.compare(response, status, token, total_attempts)
        if merchant_retry and seen.key:
            print("then      the merchant retries the same request (same Idempotency-Key)")
            before = self.stats()
            retry = self.post(key, body)
            again = self.seen(before, self.stats(), seen.key)
            total_attempts += again.attempts
            payment_id, status = self.payment_status(retry, seen)
            self.show_answer(retry, f"{payment_id} {status}" if payment_id else None)
            print(f"sandbox   {again.describe()}")
            ok = self.compare(retry, status, token, total_attempts, replay_ok=True) and ok
            response = retry
        return response

    def compare(
        self,
        response: httpx.Response,
        payment_status: str,
        token: str,
        attempts: int,
        *,
        replay_ok: bool = False,
    ) -> bool:
        (status, expected_payment), why = expected_for(token, attempts, self.read_timeout)
        code = DOCUMENTED_CODES.get(status)
        text = f"{status}{' ' + code if code else ''}, payment {expected_payment}"
        print(f"because   {why}")
        try:
            actual_code = response.json().get("code")
        except ValueError:
            actual_code = None
        ok = (
            response.status_code == status
            and payment_status == expected_payment
            and (code is None or actual_code == code)
        )
        retry_after = response.headers.get("Retry-After")
        if retry_after is not None and not valid_retry_after(retry_after):
            print(f"note      Retry-After {retry_after!r} is not delay-seconds or an HTTP-date")
            ok = False
        self.verdict(f"{self.number}", ok, text)
        return ok

    def replay(self, first_key: str, first_body: dict[str, Any], first: httpx.Response) -> None:
        self.heading("a replay: the same request again")
        self.show_request(first_key, first_body, "  (the request of scenario 1)")
        before = self.stats()
        response = self.post(first_key, first_body)
        seen = self.seen(before, self.stats(), None)
        self.show_answer(response)
        print(f"sandbox   {seen.describe()}")
        if first.status_code in STORED_STATUSES:
            ok = (
                response.status_code == first.status_code
                and response.content == first.content
                and response.headers.get("Idempotent-Replayed") == "true"
                and seen.attempts == 0
            )
            expected = (
                f"{first.status_code} again, byte-identical body, Idempotent-Replayed: true, "
                "no acquirer call"
            )
        else:
            ok = "Idempotent-Replayed" not in response.headers
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
        responses: list[httpx.Response] = []
        lock = threading.Lock()

        def send() -> None:
            response = self.post(key, body)
            with lock:
                responses.append(response)

        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seen = self.seen(before, self.stats(), None)
        responses.sort(key=lambda r: r.status_code)
        for response in responses:
            self.show_answer(response)
        print(f"sandbox   {seen.describe()}")
        statuses = [r.status_code for r in responses]
        conflict = responses[-1] if statuses[-1] == 409 else None
        ok = (
            statuses == [201, 409]
            and conflict is not None
            and conflict.json().get("code") == "idempotency_key_in_use"
            and conflict.headers.get("Retry-After") == "1"
            and seen.attempts == 1
            and seen.charges == 1
        )
        self.verdict(
            "concurrent",
            ok,
            "one 201, one 409 idempotency_key_in_use with Retry-After: 1 at once; one charge",
        )

    def changed_request(
        self, first_key: str, first_body: dict[str, Any], first: httpx.Response
    ) -> None:
        self.heading("a changed request under the same key")
        body = {**first_body, "amount": first_body["amount"] + 100}
        self.show_request(first_key, body, "  (scenario 1's key, another amount)")
        before = self.stats()
        response = self.post(first_key, body)
        seen = self.seen(before, self.stats(), None)
        self.show_answer(response)
        print(f"sandbox   {seen.describe()}")
        if first.status_code in STORED_STATUSES:
            ok = (
                response.status_code == 422
                and response.json().get("code") == "idempotency_key_reused"
                and seen.attempts == 0
            )
            expected = "422 idempotency_key_reused, no acquirer call"
        else:
            ok = response.status_code != 422
            expected = (
                f"not a 422: scenario 1's {first.status_code} was not stored, so the key was free"
            )
        self.verdict("changed", ok, expected)

    # -- the payment lifecycle: capture and refunds -----------------------------------------

    def operation(
        self, path: str, body: dict[str, Any], kind: str, key: str | None = None
    ) -> tuple[str, httpx.Response, Seen]:
        """``POST path`` (a capture or a refund) with its own key: printed, with what the
        sandbox saw for the operation's acquirer key (``capture-...``, ``refund-...``)."""
        key = key or f"demo-{self.run_id}-{self.number}-{kind}-{uuid.uuid4().hex[:4]}"
        self.show_request(key, body, path=path)
        before = self.stats()
        response = self.api.post(path, json=body, headers={"Idempotency-Key": key})
        seen = self.seen(before, self.stats(), None, kind)
        data = response.json() if response.content else {}
        label, what = "payment", None
        if data.get("object") == "refund":
            label, what = "refund", f"{data['id']} {data['status']} amount {data['amount']}"
        elif data.get("object") == "payment":
            what = f"{data['id']} {data['status']} amount_captured {data['amount_captured']}"
        self.show_answer(response, what, label)
        print(f"sandbox   {seen.describe()}")
        return key, response, seen

    def manual_payment(self) -> tuple[str | None, int]:
        self.heading("a manual payment: authorized only (capture_method manual)")
        key = f"demo-{self.run_id}-{self.number}"
        body = {**self.body("tok_visa", str(self.number), amount=2000), "capture_method": "manual"}
        response, seen, payment_id, status = self.create_shown(key, body)
        ok = response.status_code == 201 and status == "requires_capture" and seen.charges == 1
        self.verdict("manual", ok, "201, payment requires_capture, amount_captured 0; one charge")
        return (payment_id if ok else None), body["amount"]

    def partial_capture(self, payment_id: str, amount: int) -> bool:
        self.heading("a partial capture (the rest of the authorization is released)")
        captured = amount * 3 // 4
        _, response, seen = self.operation(
            f"/payments/{payment_id}/capture", {"amount": captured}, "capture"
        )
        data = response.json()
        ok = (
            response.status_code == 200
            and (data.get("status"), data.get("amount_captured")) == ("succeeded", captured)
            and (seen.attempts, seen.charges) == (1, 1)
        )
        self.verdict(
            "capture", ok, f"200, payment succeeded, amount_captured {captured}; one capture"
        )
        return ok

    def two_refunds(self, payment_id: str) -> None:
        self.heading("two partial refunds of the captured amount")
        captured = self.api.get(f"/payments/{payment_id}").json()["amount_captured"]
        amounts = (captured // 3, captured // 5)
        ok = True
        for amount in amounts:
            _, response, seen = self.operation(
                f"/payments/{payment_id}/refunds", {"amount": amount}, "refund"
            )
            data = response.json()
            ok = ok and response.status_code == 201 and data.get("status") == "succeeded"
            ok = ok and data.get("amount") == amount and (seen.attempts, seen.charges) == (1, 1)
        payment = self.api.get(f"/payments/{payment_id}").json()
        print(
            f"then      GET /payments/{payment_id}: {payment['status']}, amount_captured "
            f"{payment['amount_captured']}, amount_refunded {payment['amount_refunded']}"
        )
        ok = ok and payment["amount_refunded"] == sum(amounts)
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
        response = self.post(key, body)
        payment_id = response.json().get("id") if response.status_code == 201 else None
        print(f"setup     a payment with {method}: {response.status_code} {payment_id}")
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
        refund = first.json() if first.content else {}
        ok = (
            first.status_code == 202
            and refund.get("status") == "pending"
            and valid_retry_after(first.headers.get("Retry-After", "x"))
            and seen.charges == 1
        )
        print(f"then      GET /refunds/{refund.get('id')} every second until it is not pending")
        started = time.monotonic()
        status = refund.get("status")
        while status == "pending" and time.monotonic() - started < poll_seconds:
            time.sleep(1.0)
            polled = self.api.get(f"/refunds/{refund.get('id')}")
            status = polled.json().get("status") if polled.status_code == 200 else status
        waited = time.monotonic() - started
        print(f"answer    200  refund {refund.get('id')} {status} (after {waited:.0f} s)")
        print("then      the merchant retries the same request (same Idempotency-Key)")
        _, replay, again = self.operation(
            f"/payments/{payment_id}/refunds", {"amount": 700}, "refund", key=refund_key
        )
        ok = (
            ok
            and status == "succeeded"
            and replay.status_code == 201
            and replay.json().get("status") == "succeeded"
            and replay.headers.get("Idempotent-Replayed") == "true"
            and (again.attempts, again.charges) in ((0, 0), (0, 1))
            and self.stats().get("refunds_by_idempotency_key", {}).get(seen.key, 0) == 1
        )
        self.verdict(
            "lost refund",
            ok,
            "202, refund pending with Retry-After; reconciliation resolves it succeeded (one "
            "refund at the acquirer); the retry replays 201 succeeded, no acquirer call",
        )

    def webhook_step(self) -> None:
        """Webhooks (``scripts/demo_webhooks.py``): a 202 payment's final event arriving."""
        self.heading("webhook after a 202")
        title, ok, expected = webhook_after_reconciliation(
            str(self.api.base_url).rstrip("/"),
            str(self.sandbox.base_url).rstrip("/"),
            self.api.headers["Authorization"].removeprefix("Bearer "),
        )
        self.verdict(title, ok, expected)

    def run(self) -> int:
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
        self.changed_request(first_key, first_body, first)
        payment_id, amount = self.manual_payment()
        if payment_id and self.partial_capture(payment_id, amount):
            self.two_refunds(payment_id)
        self.lost_refund()
        self.webhook_step()

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
    parser.add_argument("--sandbox", default="http://127.0.0.1:8090", help="the sandbox acquirer")
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
    demo = Demo(api, sandbox, api_key, args.acquirer_read_timeout)
    return demo.run()


if __name__ == "__main__":
    sys.exit(main())

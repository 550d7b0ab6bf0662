"""Fault matrix: payments spread over every sandbox token scenario and every acquirer-wide
condition; every payment must end in an allowed state and the ledger audit must be clean.

Phases, one acquirer-wide condition each (set on the sandbox's control API for the phase):
none, an outage answering 503, an outage failing after commit (recorded, answered 500), an
outage resetting connections, a rate limit, a capacity limit, flapping (502), latency, and
lookup lag (``tok_lookup_lag_*`` behind an after-commit outage, so reconciliation's look-ups
miss records that exist). Within each phase the payments cycle through :data:`TOKENS`. A
third of the ``202`` answers are retried by the merchant with the same key after
``Retry-After``.

Allowed end states: ``succeeded`` or ``declined`` (one matching acquirer record),
``failed`` without any record (``acquirer_unavailable`` or ``circuit_open``: never sent;
``acquirer_rejected``: the acquirer refused our request), or ``needs_review`` (reconciliation
gave up after the short ``RECONCILIATION_MAX_AGE_SECONDS`` of the campaign stack); or no
payment at all when
every answer was ``503 acquirer_unavailable`` (the circuit breaker was open: refused before
anything was written, the key left free). Allowed answers: 201, 202,
502 ``acquirer_error`` and 503 ``acquirer_unavailable``, each consistent with the payment's
final state.

Captures and refunds: in each phase every third payment (one of the healthy fillers before)
is a lifecycle: a manual payment with an operation token of :data:`OPERATION_TOKENS` (its
authorization plain), captured in part once it is ``requires_capture`` (the rest released),
then refunded twice in part once the capture answered ``200``; a third of the ``202`` answers
are retried as above. The outages reach the capture and refund endpoints too. Allowed
operation ends: ``succeeded``; ``failed`` without anything applied (not sent, the breaker
open, refused by the acquirer) or a refund declined by it; ``needs_review``. Allowed answers:
200 (capture) or 201 (refund), 202, 502 and 503, each consistent with the operation's end.
The oracle besides the audit (which checks the authorizations) is the sandbox's settlement
listings: every lifecycle payment's ``amount_captured`` and ``amount_refunded`` equal ours
(unless one of its operations is in review), and every refund has at most one record there,
exactly one succeeded record when ours succeeded and none when ours failed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from campaigns.client import Answer, ApiClient
from campaigns.harness import (
    CampaignResult,
    Sandbox,
    Stack,
    audit_figures,
    sandbox_delta,
    status_counts,
)

#: Every per-payment scenario of the sandbox (docs/sandbox.md, "Test tokens").
TOKENS = (
    "tok_visa",
    "tok_decline",
    "tok_insufficient_funds",
    "tok_slow_1500",
    "tok_timeout_after_commit",
    "tok_500_after_commit",
    "tok_fail_400_1",
    "tok_fail_401_1",
    "tok_fail_403_1",
    "tok_fail_404_1",
    "tok_fail_409_1",
    "tok_fail_409_3",
    "tok_fail_422_1",
    "tok_fail_429_1",
    "tok_fail_429_3",
    "tok_fail_500_1",
    "tok_fail_500_3",
    "tok_fail_502_2",
    "tok_fail_503_1",
    "tok_fail_503_3",
    "tok_fail_504_1",
    "tok_fail_504_3",
    "tok_ratelimit_1",
    "tok_ratelimit_date_2",
    "tok_reset_before_commit",
    "tok_close_before_commit",
    "tok_reset_after_commit",
    "tok_close_after_commit",
    "tok_trickle_20",
    "tok_trickle",
    "tok_lookup_lag_5",
    "tok_lookup_lag_60",
)
LAG_TOKENS = ("tok_lookup_lag_8", "tok_lookup_lag_30")
#: The lifecycle payments' tokens: one fault per operation (docs/sandbox.md, "Faults in
#: captures, voids and refunds"), the authorization plain.
OPERATION_TOKENS = (
    "tok_visa",
    "tok_capture_timeout_after_commit",
    "tok_capture_500_after_commit",
    "tok_capture_reset_after_commit",
    "tok_capture_fail_503_1",
    "tok_capture_fail_500_1",
    "tok_refund_timeout_after_commit",
    "tok_refund_500_after_commit",
    "tok_refund_reset_after_commit",
    "tok_refund_fail_503_1",
    "tok_refund_fail_502_2",
    "tok_refund_decline",
    "tok_refund_lookup_lag_5",
    "tok_capture_slow_1500__refund_trickle_20",
)
#: The operation endpoints an outage reaches besides ``POST /charges``.
OPERATION_ENDPOINTS = ["POST /charges/{id}/capture", "POST /refunds"]


@dataclass(frozen=True)
class Phase:
    name: str
    setup: Callable[[Sandbox], Any]
    tokens: tuple[str, ...] = TOKENS


def _set(name: str, **fields: Any) -> Callable[[Sandbox], Any]:
    return lambda sandbox: sandbox.set_condition(name, **fields)


#: The acquirer-wide conditions, milder first: those that trip the circuit breaker come last.
PHASES = (
    Phase("none", lambda sandbox: None),
    Phase("latency", _set("latency", distribution="normal", mean_ms=400, sd_ms=200, seed=1)),
    Phase("rate_limit", _set("rate_limit", limit=15, window_seconds=2)),
    Phase("capacity", _set("capacity", max_per_second=12, overload_delay_ms=100, retry_after=1)),
    Phase(
        "lookup_lag",
        _set(
            "outage",
            duration_seconds=5,
            failure=500,
            phase="after_commit",
            endpoints=["POST /charges"],
        ),
        tokens=LAG_TOKENS,
    ),
    Phase("flapping", _set("flapping", healthy_seconds=2, failing_seconds=2, failure=502)),
    Phase(
        "outage_after_commit_500",
        _set(
            "outage",
            duration_seconds=600,
            failure=500,
            phase="after_commit",
            endpoints=["POST /charges", *OPERATION_ENDPOINTS],
        ),
    ),
    Phase(
        "outage_reset",
        _set(
            "outage",
            duration_seconds=6,
            failure="reset",
            endpoints=["POST /charges", *OPERATION_ENDPOINTS],
        ),
    ),
    Phase("outage_503", _set("outage", duration_seconds=600, failure=503, retry_after=1)),
)
#: Healthy payments sent per scenario payment, so per-payment faults alone stay a minority.
FILLERS_PER_SCENARIO = 2
FILLER = "tok_visa"

ALLOWED_ANSWERS = {201, 202, 502, 503}
#: A payment failed without anything sent: the acquirer unavailable, or the breaker open when
#: the call was made (the README's "failed-without-sending").
NOT_SENT = {("failed", "acquirer_unavailable"), ("failed", "circuit_open")}
#: Failure codes allowed at the end (each with no acquirer record: the audit checks that).
FAILED_CODES = {"acquirer_unavailable", "circuit_open", "acquirer_rejected"}


#: Failure codes allowed at an operation's end: never applied (not sent, the breaker open,
#: refused by the acquirer), or a refund the acquirer declined.
OPERATION_FAILED_CODES = FAILED_CODES | {"do_not_honor", "insufficient_funds"}
#: How long a lifecycle waits for a ``202`` authorization to be resolved before its capture.
LIFECYCLE_WAIT_SECONDS = 20.0


@dataclass
class OperationSent:
    """One capture or refund of a lifecycle payment: its key, path, body and answers."""

    kind: str
    key: str
    path: str
    body: dict
    answers: list[Answer] = field(default_factory=list)

    @property
    def final(self) -> Answer:
        return self.answers[-1]


@dataclass
class Sent:
    key: str
    phase: str
    token: str
    body: dict
    answers: list[Answer]
    operations: list[OperationSent] = field(default_factory=list)

    @property
    def lifecycle(self) -> bool:
        return self.body.get("capture_method") == "manual"


async def _send(api: ApiClient, send: Callable[[], Any], answers: list[Answer], rng) -> Answer:
    """``send()`` once, then (a third of the ``202`` answers) again after ``Retry-After``."""
    answer = await send()
    answers.append(answer)
    if answer.status == 202 and rng.random() < 0.33:
        await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
        answer = await send()
        answers.append(answer)
    return answer


async def _operate(api: ApiClient, sent: Sent, kind: str, path: str, body: dict, rng) -> Answer:
    operation = OperationSent(kind, f"{sent.key}-{kind}-{len(sent.operations)}", path, body)
    sent.operations.append(operation)
    return await _send(
        api,
        lambda: api.request(
            "POST", operation.path, json=body, headers={"Idempotency-Key": operation.key}
        ),
        operation.answers,
        rng,
    )


async def _held(api: ApiClient, payment_id: str) -> bool:
    """Whether the payment is (or within :data:`LIFECYCLE_WAIT_SECONDS` becomes)
    ``requires_capture``: reconciliation resolves a ``202`` authorization meanwhile."""
    deadline = time.monotonic() + LIFECYCLE_WAIT_SECONDS
    while True:
        answer = await api.request("GET", f"/payments/{payment_id}")
        status = (answer.json() or {}).get("status") if answer.status == 200 else None
        if status != "processing" or time.monotonic() > deadline:
            return status == "requires_capture"
        await asyncio.sleep(1.0)


async def _pay(api: ApiClient, sent: Sent, rng: random.Random) -> None:
    answer = await _send(api, lambda: api.create(sent.key, sent.body), sent.answers, rng)
    payment_id = answer.payment_id
    if not sent.lifecycle or answer.status not in (201, 202) or payment_id is None:
        return
    if not await _held(api, payment_id):
        return
    # Capture three quarters (the rest is released), then refund twice in part.
    captured = sent.body["amount"] * 3 // 4
    base = f"/payments/{payment_id}"
    capture = await _operate(api, sent, "capture", f"{base}/capture", {"amount": captured}, rng)
    if capture.status != 200:
        return
    for amount in (captured // 4, captured // 3):
        await _operate(api, sent, "refund", f"{base}/refunds", {"amount": amount}, rng)


async def _phase(
    stack: Stack,
    api_key: str,
    phase: Phase,
    items: list[Sent],
    concurrency: int,
    rng: random.Random,
    pace: float | None = None,
) -> float:
    assert stack.web is not None and stack.sandbox is not None
    stack.sandbox.clear_conditions()
    phase.setup(stack.sandbox)
    started = time.monotonic()
    api = ApiClient(stack.web.url, api_key, max_connections=concurrency + 4, timeout=60)
    pending: asyncio.Queue[tuple[int, Sent]] = asyncio.Queue()
    for index, item in enumerate(items):
        pending.put_nowait((index, item))

    async def worker() -> None:
        while not pending.empty():
            index, item = pending.get_nowait()
            if pace:  # spread the phase over time: the breaker opens, probes, closes meanwhile
                await asyncio.sleep(max(0.0, started + index / pace - time.monotonic()))
            await _pay(api, item, rng)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await api.close()
        stack.sandbox.clear_conditions()
    return time.monotonic() - started


async def _recover(
    stack: Stack, api_key: str, make: Callable[[], Sent], probes: list[Sent], timeout: float
) -> float | None:
    """After a phase: one healthy payment a second until one is approved (the circuit
    breaker closed again, the gate opened); returns the seconds it took (None: not within
    ``timeout``). The probes are payments of the matrix like the others."""
    assert stack.web is not None
    api = ApiClient(stack.web.url, api_key, max_connections=2, timeout=60)
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout:
            probe = make()
            probes.append(probe)
            answer = await api.create(probe.key, probe.body)
            probe.answers.append(answer)
            if answer.status == 201:
                return time.monotonic() - started
            await asyncio.sleep(1.0)
        return None
    finally:
        await api.close()


def _check_answer(answer: Answer, payment: dict | None, *, manual: bool = False) -> str | None:
    """Why ``answer`` is not allowed for ``payment``'s final state (None when it is). A manual
    payment's ``201 requires_capture`` stays right once it is captured."""
    if answer.status not in ALLOWED_ANSWERS:
        return f"answer {answer.status or answer.error}"
    data = answer.json() or {}
    if payment is None:
        return "no payment"
    held = manual and data.get("status") == "requires_capture"
    if held and payment["status"] not in ("requires_capture", "succeeded"):
        return f"201 requires_capture but the payment ended {payment['status']}"
    if answer.status == 201 and not held and data.get("status") != payment["status"]:
        return f"201 {data.get('status')} but the payment ended {payment['status']}"
    if answer.status == 503 and (
        data.get("code") != "acquirer_unavailable"
        or (payment["status"], payment["failure_code"]) not in NOT_SENT
    ):
        return f"503 {data.get('code')} but the payment ended {payment['status']}"
    if answer.status == 502 and (
        data.get("code") != "acquirer_error" or payment["failure_code"] != "acquirer_rejected"
    ):
        return f"502 {data.get('code')} but the payment ended {payment['status']}"
    if answer.content_type not in ("application/json", "application/problem+json"):
        return f"content type {answer.content_type}"
    return None


def _check_operation(
    operation: OperationSent, found: dict | None, refunds: dict[str, list[dict]]
) -> list[str]:
    """Why ``operation``'s answers and end (``found``: its row, None when nothing was
    written) are not allowed, here and in the sandbox's refund listing."""
    if found is None:
        refused = all(
            a.status == 503 and (a.json() or {}).get("code") == "acquirer_unavailable"
            for a in operation.answers
        )
        return [] if operation.answers and refused else ["no operation"]
    problems = []
    status, code = found["status"], found["failure_code"]
    if status == "pending":
        problems.append("still pending")
    if status == "failed" and code not in OPERATION_FAILED_CODES:
        problems.append(f"failed with {code}")
    done = 201 if operation.kind == "refund" else 200
    for answer in operation.answers:
        data = answer.json() or {}
        if answer.status not in (done, 202, 502, 503):
            problems.append(f"answer {answer.status or answer.error}")
        elif answer.status == done and operation.kind == "refund" and data.get("status") != status:
            problems.append(f"201 {data.get('status')} but the refund ended {status}")
        elif answer.status == done and operation.kind == "capture" and status != "succeeded":
            problems.append(f"200 but the capture ended {status}")
        elif answer.status == 503 and (
            data.get("code") != "acquirer_unavailable" or (status, code) not in NOT_SENT
        ):
            problems.append(f"503 {data.get('code')} but the operation ended {status}/{code}")
        elif answer.status == 502 and (status, code) != ("failed", "acquirer_rejected"):
            problems.append(f"502 but the operation ended {status}/{code}")
    if operation.kind == "refund":
        listed = [(r["status"], r["amount"]) for r in refunds.get(found["id"], [])]
        expected = {
            "succeeded": [("succeeded", found["amount"])],
            "failed": [] if code in FAILED_CODES else [("failed", found["amount"])],
        }
        if len(listed) > 1 or (status in expected and listed != expected[status]):
            problems.append(f"refund {status}/{code}, the sandbox lists {listed}")
    return problems


def _check_lifecycle(
    item: Sent,
    operations: dict[str, dict],
    charges: dict[str, dict],
    refunds: dict[str, list[dict]],
) -> tuple[list[str], list[str]]:
    """The lifecycle payment's operations (their ends, as ``kind status`` labels) and what is
    wrong with them or with the payment's amounts against the sandbox's settlement listing."""
    problems, ends = [], []
    rows = []
    for operation in item.operations:
        found = operations.get(operation.key)
        ends.append(f"{operation.kind} {found['status'] if found else 'not written'}")
        problems.extend(
            f"{operation.key} ({operation.kind}): {why}"
            for why in _check_operation(operation, found, refunds)
        )
        rows += [found] if found else []
    if not rows or any(row["status"] == "needs_review" for row in rows):
        return problems, ends  # in review: a human decides what the acquirer holds
    payment_id = rows[0]["payment_id"]
    ours = (rows[0]["amount_captured"], rows[0]["amount_refunded"])
    charge = charges.get(payment_id)
    theirs = (charge["amount_captured"], charge["amount_refunded"]) if charge else None
    if ours != theirs:
        problems.append(f"{item.key}: captured/refunded ours {ours}, the sandbox's {theirs}")
    return problems, ends


def run(
    stack: Stack,
    *,
    payments: int = 1000,
    concurrency: int = 16,
    seed: int = 8,
    recovery_timeout: float = 60.0,
    pace: float | None = None,
    merchant: str = "matrix",
    on_merchant: Callable[[int, str], None] | None = None,
) -> CampaignResult:
    """The matrix for a merchant of its own (``merchant``); ``on_merchant(id, api_key)`` runs
    before the first payment (the webhooks campaign registers its endpoints there)."""
    result = CampaignResult("matrix")
    rng = random.Random(seed)
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant(merchant)
    if on_merchant is not None:
        on_merchant(merchant_id, api_key)
    assert stack.sandbox is not None
    stats_before = stack.sandbox.stats()
    per_phase = max(1, payments // len(PHASES))
    plan: dict[str, list[Sent]] = {}
    counter = 0
    scenario = {"all": 0, "lag": 0, "operations": 0}

    def sent(phase: str, token: str, *, manual: bool = False) -> Sent:
        nonlocal counter
        key = f"matrix-{stack.tag}-{counter}"
        body = {
            "amount": 1000 + counter,
            "currency": "EUR",
            "payment_method": token,
            "reference": key,
        }
        if manual:
            body["capture_method"] = "manual"
        counter += 1
        return Sent(key, phase, token, body, [])

    for phase in PHASES:
        items = []
        cycle = "lag" if phase.tokens is LAG_TOKENS else "all"
        for n in range(per_phase):
            if n % (FILLERS_PER_SCENARIO + 1) == 0:
                items.append(sent(phase.name, phase.tokens[scenario[cycle] % len(phase.tokens)]))
                scenario[cycle] += 1
            elif n % (FILLERS_PER_SCENARIO + 1) == 1:  # a lifecycle instead of a filler
                token = OPERATION_TOKENS[scenario["operations"] % len(OPERATION_TOKENS)]
                scenario["operations"] += 1
                items.append(sent(phase.name, token, manual=True))
            else:
                items.append(sent(phase.name, FILLER))
        plan[phase.name] = items
    durations: dict[str, float] = {}
    recovery: dict[str, str] = {}
    for phase in PHASES:
        durations[phase.name] = round(
            asyncio.run(_phase(stack, api_key, phase, plan[phase.name], concurrency, rng, pace)),
            1,
        )
        probes: list[Sent] = []
        if recovery_timeout <= 0:
            recovery[phase.name] = "not measured"
            continue
        seconds = asyncio.run(
            _recover(
                stack,
                api_key,
                lambda name=phase.name: sent(name + "/probe", FILLER),
                probes,
                recovery_timeout,
            )
        )
        plan[phase.name] += probes
        recovery[phase.name] = (
            f"{seconds:.0f} s" if seconds is not None else f"not within {recovery_timeout:g} s"
        )
    waited = time.monotonic()
    left = stack.wait_resolved(since, timeout=90)
    resolution = time.monotonic() - waited

    rows = stack.payments(since, merchant_id)
    by_key: dict[str, list[dict]] = {}
    for row in rows:
        by_key.setdefault(row["reference"], []).append(row)
    sent = [item for items in plan.values() for item in items]
    answers = [a for item in sent for a in item.answers]
    statuses: dict[str, int] = {}
    for answer in answers:
        label = str(answer.status) if answer.status is not None else f"none ({answer.error})"
        statuses[label] = statuses.get(label, 0) + 1
    problems: list[str] = []
    refused_unwritten = 0
    per_token: dict[str, dict[str, int]] = {}
    per_phase_status: dict[str, dict[str, int]] = {}
    for item in sent:
        found = by_key.get(item.key, [])
        if (
            not found
            and item.answers
            and all(
                a.status == 503 and (a.json() or {}).get("code") == "acquirer_unavailable"
                for a in item.answers
            )
        ):
            # The breaker was open: refused before anything was written, the key left free.
            refused_unwritten += 1
            per_token.setdefault(item.token, {}).setdefault("refused, nothing written", 0)
            per_token[item.token]["refused, nothing written"] += 1
            per_phase_status.setdefault(item.phase, {}).setdefault("refused, nothing written", 0)
            per_phase_status[item.phase]["refused, nothing written"] += 1
            continue
        if len(found) != 1:
            problems.append(f"{item.key} ({item.phase}, {item.token}): {len(found)} payments")
            continue
        payment = found[0]
        final = payment["status"] + (
            f"/{payment['failure_code']}" if payment["failure_code"] else ""
        )
        per_token.setdefault(item.token, {}).setdefault(final, 0)
        per_token[item.token][final] += 1
        per_phase_status.setdefault(item.phase, {}).setdefault(final, 0)
        per_phase_status[item.phase][final] += 1
        if payment["status"] == "processing":
            problems.append(f"{item.key} ({item.phase}, {item.token}): still processing")
        if payment["status"] == "failed" and payment["failure_code"] not in FAILED_CODES:
            problems.append(f"{item.key}: failed with {payment['failure_code']}")
        for answer in item.answers:
            why = _check_answer(answer, payment, manual=item.lifecycle)
            if why:
                problems.append(f"{item.key} ({item.phase}, {item.token}): {why}")
    # Captures and refunds: their answers and ends, and the sandbox's settlement listings.
    operations = {o["key"]: o for o in stack.operations(since, merchant_id)}
    charges = {c["reference"]: c for c in stack.sandbox.listing("charges", since)}
    refunds: dict[str, list[dict]] = {}
    for refund in stack.sandbox.listing("refunds", since):
        refunds.setdefault(refund["reference"], []).append(refund)
    operation_ends: dict[str, int] = {}
    for item in sent:
        found_problems, ends = _check_lifecycle(item, operations, charges, refunds)
        problems.extend(f"({item.phase}, {item.token}) {why}" for why in found_problems)
        for end in ends:
            operation_ends[end] = operation_ends.get(end, 0) + 1
        if item.lifecycle:
            per_token.setdefault(item.token, {})
            for end in ends:
                per_token[item.token][end] = per_token[item.token].get(end, 0) + 1
    operation_answers = [a for item in sent for o in item.operations for a in o.answers]
    delta = sandbox_delta(stats_before, stack.sandbox.stats())
    audit = stack.audit(since, "matrix")
    unexpected_5xx = sum(1 for a in answers + operation_answers if a.status in (500, 504))

    result.figures.update(
        {
            "payments sent": len(sent),
            "requests (merchant retries of 202 included)": len(answers),
            "answers by status": dict(sorted(statuses.items())),
            "5xx other than 502/503 (violations)": unexpected_5xx,
            "acquirer requests": delta["acquirer_requests"],
            "faults injected (acquirer)": delta["faults"],
            "phase durations, s": durations,
            "recovery after each phase (until a payment is approved)": recovery,
            "resolution wait after the last phase, s": round(resolution, 1),
            "payments by final status": status_counts(rows),
            "lifecycles (manual, captured, refunded twice)": sum(1 for i in sent if i.lifecycle),
            "operation requests (retries of 202 included)": len(operation_answers),
            "operation answers by status": dict(
                sorted(Counter(str(a.status or a.error) for a in operation_answers).items())
            ),
            "operations by final status": dict(sorted(operation_ends.items())),
            "503 before anything was written (breaker open, no payment)": refused_unwritten,
        }
    )
    for phase_name, counts in sorted(per_phase_status.items()):
        result.figures[f"  phase {phase_name}"] = dict(sorted(counts.items()))
    result.figures["tokens -> final states"] = len(per_token)
    for token in sorted(per_token):
        result.figures[f"  {token}"] = dict(sorted(per_token[token].items()))
    audit_figures(result, audit)
    result.check(left == 0, f"{left} payments still processing")
    result.violations.extend(problems[:40])
    if len(problems) > 40:
        result.violations.append(f"... {len(problems) - 40} more payment problems")
    return result

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
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench.campaigns.client import Answer, ApiClient
from bench.campaigns.harness import (
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
            endpoints=["POST /charges"],
        ),
    ),
    Phase(
        "outage_reset",
        _set("outage", duration_seconds=6, failure="reset", endpoints=["POST /charges"]),
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


@dataclass
class Sent:
    key: str
    phase: str
    token: str
    body: dict
    answers: list[Answer]


async def _pay(api: ApiClient, sent: Sent, rng: random.Random) -> None:
    answer = await api.create(sent.key, sent.body)
    sent.answers.append(answer)
    if answer.status == 202 and rng.random() < 0.33:
        await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
        sent.answers.append(await api.create(sent.key, sent.body))


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


def _check_answer(answer: Answer, payment: dict | None) -> str | None:
    """Why ``answer`` is not allowed for ``payment``'s final state (None when it is)."""
    if answer.status not in ALLOWED_ANSWERS:
        return f"answer {answer.status or answer.error}"
    data = answer.json() or {}
    if payment is None:
        return "no payment"
    if answer.status == 201 and data.get("status") != payment["status"]:
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


def run(
    stack: Stack,
    *,
    payments: int = 1000,
    concurrency: int = 16,
    seed: int = 8,
    recovery_timeout: float = 60.0,
    pace: float | None = None,
) -> CampaignResult:
    result = CampaignResult("matrix")
    rng = random.Random(seed)
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("matrix")
    assert stack.sandbox is not None
    stats_before = stack.sandbox.stats()
    per_phase = max(1, payments // len(PHASES))
    plan: dict[str, list[Sent]] = {}
    counter = 0
    scenario = {"all": 0, "lag": 0}

    def sent(phase: str, token: str) -> Sent:
        nonlocal counter
        key = f"matrix-{stack.tag}-{counter}"
        body = {
            "amount": 1000 + counter,
            "currency": "EUR",
            "payment_method": token,
            "reference": key,
        }
        counter += 1
        return Sent(key, phase, token, body, [])

    for phase in PHASES:
        items = []
        cycle = "lag" if phase.tokens is LAG_TOKENS else "all"
        for n in range(per_phase):
            if n % (FILLERS_PER_SCENARIO + 1) == 0:
                token = phase.tokens[scenario[cycle] % len(phase.tokens)]
                scenario[cycle] += 1
            else:
                token = FILLER
            items.append(sent(phase.name, token))
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
            why = _check_answer(answer, payment)
            if why:
                problems.append(f"{item.key} ({item.phase}, {item.token}): {why}")
    delta = sandbox_delta(stats_before, stack.sandbox.stats())
    audit = stack.audit(since, "matrix")
    unexpected_5xx = sum(1 for a in answers if a.status in (500, 504))

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

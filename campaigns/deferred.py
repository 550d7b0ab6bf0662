"""A deferred backlog built during an outage, drained after it at the acquirer's pace.

The stack has two acquirers, ``alpha`` (the web processes') and ``beta`` (which the worker's
sweep may fail over to): both are down in the outage and both get the capacity after it.

1. **Outage**: each sandbox answers ``POST /charges`` with ``503`` (nothing processed). The
   merchant sends ``payments`` renewals with ``"allow_deferred": true``, ``concurrency`` at a
   time. The first attempts are certainly not applied and the breaker opens: every answer must
   be ``202`` with the payment ``deferred``, and the acquirer must record nothing.
2. **Recovery**: the outage ends and each sandbox gets a capacity of ``capacity`` requests per
   second (above it: ``503``, counted by the sandbox as a ``capacity`` fault). Beat's deferred
   sweep (every second on the stack, ``DEFERRED_SUBMIT_RATE_PER_SECOND`` below the capacity)
   drains the backlog through the Celery worker.
3. **Checks**, from the sandboxes' own counts and the database: every payment final
   (``succeeded``), one acquirer record per payment across both (zero double authorizations),
   each acquirer's arrivals in every wall-clock second of the drain at most its capacity and no
   capacity refusal, the ledger audit clean. Printed: the backlog, the drain's time and rate,
   the busiest second against the capacity, the refusals, the re-deferrals.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from campaigns.client import Answer, ApiClient
from campaigns.harness import CampaignResult, Stack, audit_figures, status_counts


async def _build(stack: Stack, api_key: str, references: list[str], concurrency: int):
    assert stack.web is not None
    api = ApiClient(stack.web.url, api_key, max_connections=concurrency + 4, timeout=60)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for reference in references:
        queue.put_nowait(reference)
    answers: dict[str, Answer] = {}

    async def worker() -> None:
        while not queue.empty():
            reference = queue.get_nowait()
            body = {
                "amount": 990,
                "currency": "EUR",
                "payment_method": "tok_visa",
                "reference": reference,
                "allow_deferred": True,
            }
            answers[reference] = await api.create(reference, body)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await api.close()
    return answers


def _per_second(arrivals: dict[str, int], since_ms: int) -> dict[int, int]:
    """Arrivals per wall-clock second (epoch seconds) from the sandbox's 100 ms buckets."""
    seconds: Counter[int] = Counter()
    for bucket, count in arrivals.items():
        if int(bucket) >= since_ms:
            seconds[int(bucket) // 1000] += count
    return dict(seconds)


def _charges_status(stats: dict[str, Any], status: str) -> int:
    return stats["requests_by_endpoint"].get("POST /charges", {}).get(status, 0)


def run(
    stack: Stack,
    *,
    payments: int = 500,
    concurrency: int = 16,
    capacity: int = 20,
    drain_timeout: float = 300.0,
) -> CampaignResult:
    result = CampaignResult("deferred")
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("deferred")
    sandbox, beta = stack.sandbox, stack.beta
    assert sandbox is not None and beta is not None
    acquirers = {"alpha": sandbox, "beta": beta}  # the worker's sweep knows both (failover)
    references = [f"renewal-{stack.tag}-{index}" for index in range(payments)]

    # 1. The outage, of every acquirer: the backlog.
    for acquirer in acquirers.values():
        acquirer.set_condition(
            "outage", duration_seconds=3600, failure=503, endpoints=["POST /charges"]
        )
    before = {name: acquirer.stats() for name, acquirer in acquirers.items()}
    built_at = time.monotonic()
    answers = asyncio.run(_build(stack, api_key, references, concurrency))
    build_seconds = time.monotonic() - built_at
    during = {name: acquirer.stats() for name, acquirer in acquirers.items()}
    answered = Counter(
        f"{a.status} {a.json().get('status', a.json().get('code'))}" if a.status else "none"
        for a in answers.values()
    )
    deferred_answers = answered.get("202 deferred", 0)
    result.check(deferred_answers == payments, f"not every answer was 202 deferred: {answered}")
    result.check(
        all(during[n]["charges_total"] == before[n]["charges_total"] for n in acquirers),
        "an acquirer recorded charges during the outage",
    )
    (backlog,) = stack.sql(
        "SELECT count(*) FROM payments_payment WHERE merchant_id = %s AND status = 'deferred'",
        [merchant_id],
    )[0]

    # 2. The recovery: a capacity at each acquirer, and the sweep drains the backlog.
    for acquirer in acquirers.values():
        acquirer.http.delete("/_sandbox/conditions/outage").raise_for_status()
        acquirer.set_condition("capacity", max_per_second=capacity, retry_after=1)
    drain_from_ms = int(time.time() * 1000)
    drain_started = time.monotonic()
    left = backlog
    while time.monotonic() - drain_started < drain_timeout:
        (left,) = stack.sql(
            "SELECT count(*) FROM payments_payment WHERE merchant_id = %s "
            "AND status IN ('deferred', 'processing')",
            [merchant_id],
        )[0]
        if left == 0:
            break
        time.sleep(0.25)
    drain_seconds = time.monotonic() - drain_started
    after = {name: acquirer.stats() for name, acquirer in acquirers.items()}
    for acquirer in acquirers.values():
        acquirer.clear_conditions()

    # 3. The checks, each acquirer's own counts: records summed across both, so a payment
    # authorized at two acquirers counts as doubled.
    rows = stack.payments(since, merchant_id)
    ids = [row["id"] for row in rows]
    records: Counter[str] = Counter()
    for stats in after.values():
        records.update(stats["charges_by_reference"])
    doubled = [pid for pid in ids if records.get(pid, 0) > 1]
    missing = [pid for pid in ids if records.get(pid, 0) == 0]
    busiest = max(
        (
            max(_per_second(stats["arrivals_per_100ms"], drain_from_ms).values(), default=0)
            for stats in after.values()
        ),
        default=0,
    )
    capacity_refusals = sum(
        after[n]["faults_injected"].get("capacity", 0)
        - before[n]["faults_injected"].get("capacity", 0)
        for n in acquirers
    )
    refused_503 = sum(
        _charges_status(after[n], "503") - _charges_status(during[n], "503") for n in acquirers
    )
    refused_429 = sum(
        _charges_status(after[n], "429") - _charges_status(during[n], "429") for n in acquirers
    )
    drained_at = {
        n: sum(1 for pid in ids if after[n]["charges_by_reference"].get(pid)) for n in acquirers
    }
    (deferrals,) = stack.sql(
        "SELECT count(*) FROM payments_paymentevent e JOIN payments_payment p "
        "ON p.id = e.payment_id WHERE p.merchant_id = %s AND e.type = 'payment_deferred'",
        [merchant_id],
    )[0]
    audit = stack.audit(since, "deferred")

    result.figures["payments (allow_deferred)"] = payments
    result.figures["answers during the outage"] = dict(answered)
    result.figures["backlog built"] = f"{backlog} deferred in {build_seconds:.1f} s"
    result.figures["acquirer capacity (requests/s)"] = capacity
    result.figures["drain"] = (
        f"{backlog - left} of {backlog} in {drain_seconds:.1f} s "
        f"({(backlog - left) / max(drain_seconds, 0.001):.1f} payments/s)"
    )
    result.figures["authorized at (alpha / beta)"] = f"{drained_at['alpha']} / {drained_at['beta']}"
    result.figures["busiest second of the drain (arrivals at one acquirer)"] = (
        f"{busiest} of {capacity} ({busiest / capacity:.0%} of capacity)"
    )
    result.figures["capacity refusals (sandbox)"] = capacity_refusals
    result.figures["503 / 429 during the drain"] = f"{refused_503} / {refused_429}"
    result.figures["deferrals (re-deferred after a refused submission)"] = (
        f"{deferrals} ({deferrals - backlog})"
    )
    result.figures["payments by status"] = status_counts(rows)
    result.figures["double authorizations (records > 1, both acquirers)"] = len(doubled)
    audit_figures(result, audit)

    result.check(left == 0, f"{left} payments still deferred or processing after the drain")
    result.check(
        all(row["status"] == "succeeded" for row in rows),
        f"not every payment succeeded: {status_counts(rows)}",
    )
    result.check(not doubled, f"{len(doubled)} payments authorized twice: {doubled[:5]}")
    result.check(not missing, f"{len(missing)} payments with no acquirer record: {missing[:5]}")
    result.check(busiest <= capacity, f"{busiest} arrivals in one second, capacity {capacity}")
    result.check(capacity_refusals == 0, f"{capacity_refusals} requests over the capacity")
    result.check(audit["clean"], "the ledger audit found discrepancies")
    return result

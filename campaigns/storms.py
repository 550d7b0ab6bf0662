"""Concurrent same-key storms: K keys x N simultaneous requests -> one payment and at most one
acquirer record per key, the same answer for every client of a key, 0 5xx.

Every key's N clients fire at once (all keys together); a client answered ``409
idempotency_key_in_use`` waits its ``Retry-After`` and tries again, as a merchant's client
would, until it gets the key's answer; a request that gets no answer at all (a kept-alive
connection the server closed as it was reused) is sent again with the same key, which is what
the key is for. Tokens make the first request slow, retried within the
request (503 once, reset after commit, 500 after commit) or declined, so duplicates arrive
while the first one is at the acquirer.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from typing import Any

from campaigns.client import Answer, ApiClient
from campaigns.harness import (
    CampaignResult,
    Stack,
    audit_figures,
    sandbox_delta,
    status_counts,
)

TOKENS = (
    "tok_visa",
    "tok_slow_800",
    "tok_decline",
    "tok_fail_503_1",
    "tok_reset_after_commit",
    "tok_insufficient_funds",
    "tok_500_after_commit",
    "tok_slow_2500",
)
MAX_TRIES_PER_CLIENT = 60


async def _client(api: ApiClient, key: str, body: dict[str, Any]) -> list[Answer]:
    answers: list[Answer] = []
    for _ in range(MAX_TRIES_PER_CLIENT):
        answer = await api.create(key, body)
        answers.append(answer)
        if answer.status is None:  # no answer (a kept-alive connection closed): same key again
            await asyncio.sleep(0.2)
            continue
        if answer.status != 409:
            break
        wait = float(answer.headers.get("retry-after", "1"))
        await asyncio.sleep(wait + random.uniform(0, 0.25))
    return answers


async def _storm(stack: Stack, api_key: str, keys: list[str], per_key: int) -> dict[str, list]:
    assert stack.web is not None
    api = ApiClient(stack.web.url, api_key, max_connections=len(keys) * per_key + 10, timeout=60)
    try:
        bodies = {
            key: {
                "amount": 100 + index,
                "currency": "EUR",
                "payment_method": TOKENS[index % len(TOKENS)],
                "reference": key,
            }
            for index, key in enumerate(keys)
        }
        tasks = {
            key: [asyncio.create_task(_client(api, key, bodies[key])) for _ in range(per_key)]
            for key in keys
        }
        return {key: [await t for t in client_tasks] for key, client_tasks in tasks.items()}
    finally:
        await api.close()


def run(stack: Stack, *, keys: int = 50, per_key: int = 20) -> CampaignResult:
    result = CampaignResult("storms")
    started = time.monotonic()
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("storms")
    assert stack.sandbox is not None
    stats_before = stack.sandbox.stats()
    names = [f"storm-{stack.tag}-{index}" for index in range(keys)]
    outcomes = asyncio.run(_storm(stack, api_key, names, per_key))

    answers = [a for clients in outcomes.values() for tries in clients for a in tries]
    statuses: dict[str, int] = {}
    for answer in answers:
        label = str(answer.status) if answer.status is not None else f"no answer ({answer.error})"
        statuses[label] = statuses.get(label, 0) + 1
    server_errors = sum(1 for a in answers if a.status is not None and a.status >= 500)
    no_answer = sum(1 for a in answers if a.status is None)
    replays = sum(1 for a in answers if a.replayed)
    disagreeing = []
    for key, clients in outcomes.items():
        finals = [tries[-1] for tries in clients]
        ids = {a.payment_id for a in finals}
        if (
            len(ids) != 1
            or None in ids
            or any(a.status not in (201, 202) for a in finals)
            or len({a.body for a in finals if a.status == 201}) > 1
        ):
            disagreeing.append(key)

    stack.wait_resolved(since, timeout=60)
    payments = [p for p in stack.payments(since, merchant_id)]
    per_key_count: dict[str, int] = {}
    for payment in payments:
        per_key_count[payment["reference"]] = per_key_count.get(payment["reference"], 0) + 1
    missing = [k for k in names if per_key_count.get(k, 0) == 0]
    doubled = [k for k, n in per_key_count.items() if n > 1]
    delta = sandbox_delta(stats_before, stack.sandbox.stats())
    audit = stack.audit(since, "storms")

    result.figures.update(
        {
            "keys x clients": f"{keys} x {per_key}",
            "requests": len(answers),
            "answers by status": dict(sorted(statuses.items())),
            "replays (Idempotent-Replayed)": replays,
            "connection errors (retried with the same key)": no_answer,
            "5xx": server_errors,
            "faults injected (acquirer)": delta["faults"],
            "acquirer requests": delta["acquirer_requests"],
            "payments by final status": status_counts(payments),
            "keys with more than one payment": len(doubled),
            "keys whose clients saw different answers": len(disagreeing),
        }
    )
    audit_figures(result, audit)
    result.check(server_errors == 0, f"{server_errors} answers were 5xx")
    unanswered_clients = sum(
        1 for clients in outcomes.values() for tries in clients if tries[-1].status is None
    )
    result.check(unanswered_clients == 0, f"{unanswered_clients} clients never got an answer")
    result.check(not missing, f"{len(missing)} keys have no payment (lost): {missing[:5]}")
    result.check(not doubled, f"{len(doubled)} keys have several payments: {doubled[:5]}")
    result.check(
        not disagreeing,
        f"clients of {len(disagreeing)} keys saw different answers: {disagreeing[:5]}",
    )
    result.check(len(payments) == keys, f"{len(payments)} payments for {keys} keys")
    result.seconds = time.monotonic() - started
    return result

"""Crash injection: the web process SIGKILLs itself at each crash point (``PAYMENTS_CRASH_POINT``,
payments/crashpoints.py), N payments per point; reconciliation (the Celery worker, beat's
sweep) must resolve every payment left behind, once.

One gunicorn per point (two workers: gunicorn respawns each killed one), requests sent one at a
time per point, the three points at once. The merchant gets no answer. Afterwards: every key
has exactly one payment, each resolved to what its token gives (``tok_visa`` succeeded,
``tok_decline`` declined, ``tok_lookup_lag_4`` succeeded although the first look-ups miss it),
at most one acquirer record each (the ledger audit is the oracle), and a retry of the same key
on a healthy web process replays the final answer.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from bench.campaigns.client import Answer, ApiClient
from bench.campaigns.harness import (
    CampaignResult,
    Stack,
    audit_figures,
    percentile,
    sandbox_delta,
    status_counts,
    wait_until,
)

CRASH_POINTS = ("after_phase1_commit", "after_acquirer_answer", "before_phase2_commit")
TOKENS = {"tok_visa": "succeeded", "tok_decline": "declined", "tok_lookup_lag_4": "succeeded"}


def _body(key: str, index: int) -> dict:
    token = list(TOKENS)[index % len(TOKENS)]
    return {"amount": 500 + index, "currency": "EUR", "payment_method": token, "reference": key}


async def _crash_runs(url: str, api_key: str, keys: list[str]) -> list[Answer]:
    api = ApiClient(url, api_key, max_connections=4, timeout=40)
    answers = []
    try:
        for index, key in enumerate(keys):
            answers.append(await api.create(key, _body(key, index)))
    finally:
        await api.close()
    return answers


async def _replays(url: str, api_key: str, bodies: dict[str, dict]) -> list[Answer]:
    api = ApiClient(url, api_key, max_connections=20, timeout=40)
    try:
        return await asyncio.gather(*(api.create(key, body) for key, body in bodies.items()))
    finally:
        await api.close()


def run(stack: Stack, *, runs: int = 50) -> CampaignResult:
    result = CampaignResult("crash")
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("crash")
    assert stack.sandbox is not None and stack.web is not None
    stats_before = stack.sandbox.stats()
    webs = {
        point: stack.start_web(
            f"web-crash-{point}", workers=2, wait=False, PAYMENTS_CRASH_POINT=point
        )
        for point in CRASH_POINTS
    }
    for point, web in webs.items():
        wait_until(web.up, timeout=60, what=f"gunicorn crashing at {point}")
    booted_before = {point: web.workers_booted() for point, web in webs.items()}
    keys = {
        point: [f"crash-{stack.tag}-{point}-{i}" for i in range(runs)] for point in CRASH_POINTS
    }

    async def all_points() -> list[list[Answer]]:
        return await asyncio.gather(
            *(_crash_runs(webs[p].url, api_key, keys[p]) for p in CRASH_POINTS)
        )

    sent_at = time.monotonic()
    answers = dict(zip(CRASH_POINTS, asyncio.run(all_points()), strict=True))
    sending = time.monotonic() - sent_at
    time.sleep(2)  # let gunicorn log the last respawns
    crashes = {p: webs[p].workers_booted() - booted_before[p] for p in CRASH_POINTS}
    answered = {p: sum(1 for a in answers[p] if a.status is not None) for p in CRASH_POINTS}
    for web in webs.values():
        web.stop()

    waited = time.monotonic()
    left = stack.wait_resolved(since, timeout=90 + runs)
    resolution = time.monotonic() - waited
    payments = stack.payments(since, merchant_id)
    by_key: dict[str, list[dict]] = {}
    for payment in payments:
        by_key.setdefault(payment["reference"], []).append(payment)
    all_keys = [k for point in CRASH_POINTS for k in keys[point]]
    lost = [k for k in all_keys if k not in by_key]
    doubled = [k for k in all_keys if len(by_key.get(k, [])) > 1]
    wrong = []
    for point in CRASH_POINTS:
        for index, key in enumerate(keys[point]):
            expected = TOKENS[_body(key, index)["payment_method"]]
            found = by_key.get(key, [])
            if len(found) == 1 and found[0]["status"] != expected:
                wrong.append(f"{key}: {found[0]['status']}, expected {expected}")
    times = [(p["updated_at"] - p["created_at"]).total_seconds() for p in payments]

    # A retry of each key on a healthy web process replays the final answer.
    bodies = {key: _body(key, i) for point in CRASH_POINTS for i, key in enumerate(keys[point])}
    replays = asyncio.run(_replays(stack.web.url, api_key, bodies))
    bad_replays = []
    for key, answer in zip(bodies, replays, strict=True):
        found = by_key.get(key, [])
        if not found:
            continue
        data = answer.json() or {}
        if not (
            answer.status == 201
            and answer.replayed
            and data.get("id") == found[0]["id"]
            and data.get("status") == found[0]["status"]
        ):
            bad_replays.append(f"{key}: {answer.status} {data.get('status')}")
    delta = sandbox_delta(stats_before, stack.sandbox.stats())
    audit = stack.audit(since, "crash")

    result.figures.update(
        {
            "runs per crash point": runs,
            "requests": sum(len(a) for a in answers.values()),
            "faults injected (worker SIGKILLs seen)": crashes,
            "requests answered (expected 0)": answered,
            "acquirer requests": delta["acquirer_requests"],
            "acquirer faults": delta["faults"],
            "payments by final status": status_counts(payments),
            "still processing": left,
            "resolved after crash, s (median / max)": f"{percentile(times, 0.5):.1f} / "
            f"{max(times, default=0):.1f}",
            "sending / resolution wait, s": f"{sending:.1f} / {resolution:.1f}",
            "keys without payment (lost)": len(lost),
            "keys with several payments": len(doubled),
            "replays of the final answer": f"{len(all_keys) - len(bad_replays)}/{len(all_keys)}",
        }
    )
    audit_figures(result, audit)
    result.check(left == 0, f"{left} payments still processing after the wait")
    result.check(not lost, f"{len(lost)} keys lost: {lost[:5]}")
    result.check(not doubled, f"{len(doubled)} keys with several payments: {doubled[:5]}")
    result.check(not wrong, f"{len(wrong)} payments resolved wrongly: {wrong[:5]}")
    result.check(not bad_replays, f"{len(bad_replays)} replays wrong: {bad_replays[:5]}")
    for point in CRASH_POINTS:
        result.check(
            answered[point] == 0, f"{point}: {answered[point]} requests were answered (no crash)"
        )
        result.check(
            crashes[point] >= runs, f"{point}: {crashes[point]} worker restarts for {runs} runs"
        )
    return result

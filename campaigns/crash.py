"""Crash injection: the web process SIGKILLs itself at each crash point (``PAYMENTS_CRASH_POINT``,
payments/core/crashpoints.py), N requests per point; reconciliation (the Celery worker, beat's
sweep) must resolve every payment and every capture, void and refund left behind, once.

One gunicorn per phase, two workers each (gunicorn respawns each killed one), armed for that
phase of the authorization and of every operation (``PAYMENTS_CRASH_POINT`` naming four
points): its requests are sent one at a time, the authorization's runs then each operation's,
so every request reaches its point alone; the three gunicorns at once. The merchant gets no
answer.

- The authorization's points (``after_phase1_commit``, ``after_acquirer_answer``,
  ``before_phase2_commit``): afterwards every key has exactly one payment, each resolved to what
  its token gives (``tok_visa`` succeeded, ``tok_decline`` declined, ``tok_lookup_lag_4``
  succeeded although the first look-ups miss it), at most one acquirer record each (the ledger
  audit is the oracle), and a retry of the same key on a healthy web process replays the final
  answer.
- Each operation's points (``capture_<phase>``, ``void_<phase>``, ``refund_<phase>``): the
  payment is made first on the healthy web process (manual for a capture or a void, automatic
  for a refund), then the operation is sent to the crashing one. Afterwards every key has
  exactly one operation, resolved to what its token and amount give (a capture of all or part
  of the amount, a void, a refund of part of it: ``tok_visa`` and ``tok_refund_lookup_lag_4``
  succeeded, ``tok_refund_decline`` failed at the acquirer); the sandbox recorded exactly one
  operation for the payment and its capture state is ours (its stats and settlement listings
  are the oracle); a retry of the same key on the healthy web process replays the final answer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from campaigns.client import Answer, ApiClient
from campaigns.harness import (
    CampaignResult,
    Stack,
    audit_figures,
    percentile,
    sandbox_delta,
    status_counts,
    wait_until,
)

#: The three phases (payments/core/crashpoints.py); the authorization's points are their names.
CRASH_POINTS = ("after_phase1_commit", "after_acquirer_answer", "before_phase2_commit")
TOKENS = {"tok_visa": "succeeded", "tok_decline": "declined", "tok_lookup_lag_4": "succeeded"}
#: Each operation's points: ``<operation>_<phase>``.
OPERATIONS = ("capture", "void", "refund")
OPERATION_CRASH_POINTS = tuple(f"{kind}_{phase}" for kind in OPERATIONS for phase in CRASH_POINTS)
#: The authorized amount of every operation's payment, in minor units.
OPERATION_PAYMENT_AMOUNT = 10_000
#: Per operation: the payments' capture method, the path after ``/payments/{id}/``, and the
#: cycle of (token, operation body, final operation status) the runs go through.
OPERATION_CASES: dict[str, tuple[str, str, tuple[tuple[str, dict, str], ...]]] = {
    "capture": (
        "manual",
        "capture",
        (("tok_visa", {}, "succeeded"), ("tok_visa", {"amount": 6_000}, "succeeded")),
    ),
    "void": ("manual", "void", (("tok_visa", {}, "succeeded"),)),
    "refund": (
        "automatic",
        "refunds",
        (
            ("tok_visa", {"amount": 2_500}, "succeeded"),
            ("tok_refund_lookup_lag_4", {"amount": 4_000}, "succeeded"),
            ("tok_refund_decline", {"amount": 1_000}, "failed"),
        ),
    ),
}


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


@dataclass
class _OperationRun:
    """One operation sent to a crashing web process: its key, payment and expected end."""

    point: str
    kind: str
    key: str
    token: str
    body: dict
    expected: str
    payment_id: str | None = None
    answer: Answer | None = None

    @property
    def path(self) -> str:
        return f"/payments/{self.payment_id}/{OPERATION_CASES[self.kind][1]}"


def _operation_runs(tag: str, runs: int) -> dict[str, list[_OperationRun]]:
    plan: dict[str, list[_OperationRun]] = {}
    for point in OPERATION_CRASH_POINTS:
        kind = point.split("_", 1)[0]
        cycle = OPERATION_CASES[kind][2]
        plan[point] = [
            _OperationRun(point, kind, f"crash-{tag}-{point}-{i}", *cycle[i % len(cycle)])
            for i in range(runs)
        ]
    return plan


async def _prepare_payments(url: str, api_key: str, runs: list[_OperationRun]) -> list[str]:
    """Each run's payment, made on the healthy web process; returns what went wrong."""
    api = ApiClient(url, api_key, max_connections=8, timeout=40)
    problems: list[str] = []

    async def one(run: _OperationRun) -> None:
        body = {
            "amount": OPERATION_PAYMENT_AMOUNT,
            "currency": "EUR",
            "payment_method": run.token,
            "reference": run.key,
            "capture_method": OPERATION_CASES[run.kind][0],
        }
        answer = await api.create(f"{run.key}-payment", body)
        if answer.status != 201:
            problems.append(f"{run.key}: the payment was answered {answer.status}")
        run.payment_id = answer.payment_id

    try:
        await asyncio.gather(*(one(run) for run in runs))
    finally:
        await api.close()
    return problems


async def _operation_crash_runs(url: str, api_key: str, runs: list[_OperationRun]) -> None:
    api = ApiClient(url, api_key, max_connections=2, timeout=40)
    try:
        for run in runs:
            if run.payment_id is not None:
                run.answer = await api.request(
                    "POST", run.path, json=run.body, headers={"Idempotency-Key": run.key}
                )
    finally:
        await api.close()


async def _operation_replays(url: str, api_key: str, runs: list[_OperationRun]) -> list[Answer]:
    api = ApiClient(url, api_key, max_connections=20, timeout=40)
    try:
        return await asyncio.gather(
            *(
                api.request("POST", run.path, json=run.body, headers={"Idempotency-Key": run.key})
                for run in runs
            )
        )
    finally:
        await api.close()


def _operation_wrong(
    run: _OperationRun,
    operation: dict,
    stats: dict,
    charges: dict[str, dict],
    refunds: dict[str, list[dict]],
) -> list[str]:
    """Why ``operation`` (the only one of ``run``'s key) is not the end its run expects, here
    or at the sandbox (None of it: an empty list)."""
    wrong = []
    amount = run.body.get("amount", OPERATION_PAYMENT_AMOUNT)
    if operation["status"] != run.expected:
        wrong.append(f"{operation['status']}, expected {run.expected}")
    recorded = stats.get(f"{run.kind}s_by_charge_reference", {}).get(run.payment_id, 0)
    if recorded != 1:
        wrong.append(f"{recorded} {run.kind}s at the sandbox")
    charge = charges.get(run.payment_id or "")
    if charge is None:
        return [*wrong, "no charge in the sandbox's listing"]
    ours = {
        "captured": operation["amount_captured"],
        "refunded": operation["amount_refunded"],
        "voided": operation["payment_status"] == "canceled",
    }
    theirs = {
        "captured": charge["amount_captured"],
        "refunded": charge["amount_refunded"],
        "voided": charge["voided"],
    }
    if ours != theirs:
        wrong.append(f"ours {ours}, the sandbox's {theirs}")
    succeeded = operation["status"] == "succeeded"
    if run.kind == "capture" and succeeded and ours["captured"] != amount:
        wrong.append(f"captured {ours['captured']}, expected {amount}")
    if run.kind == "void" and succeeded and not ours["voided"]:
        wrong.append(f"payment {operation['payment_status']}, expected canceled")
    if run.kind == "refund":
        listed = [(r["status"], r["amount"]) for r in refunds.get(operation["id"], [])]
        if listed != [(operation["status"], amount)]:
            wrong.append(f"the sandbox lists the refund as {listed}")
        if ours["refunded"] != (amount if succeeded else 0):
            wrong.append(f"refunded {ours['refunded']}")
    return wrong


def _replay_wrong(run: _OperationRun, operation: dict, answer: Answer) -> str | None:
    data = answer.json() or {}
    expected_status = 201 if run.kind == "refund" else 200
    expected = (
        (operation["id"], operation["status"])
        if run.kind == "refund"
        else (run.payment_id, operation["payment_status"])
    )
    if (
        answer.status == expected_status
        and answer.replayed
        and (data.get("id"), data.get("status")) == expected
    ):
        return None
    return f"{run.key}: {answer.status} {data.get('status')}"


def run(stack: Stack, *, runs: int = 50) -> CampaignResult:
    result = CampaignResult("crash")
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("crash")
    assert stack.sandbox is not None and stack.web is not None
    operation_plan = _operation_runs(stack.tag, runs)
    operation_runs = [run for point in OPERATION_CRASH_POINTS for run in operation_plan[point]]
    not_prepared = asyncio.run(_prepare_payments(stack.web.url, api_key, operation_runs))
    stats_before = stack.sandbox.stats()
    points = CRASH_POINTS + OPERATION_CRASH_POINTS
    # One gunicorn per phase: the authorization's point and each operation's at that phase.
    armed = {phase: (phase, *(f"{kind}_{phase}" for kind in OPERATIONS)) for phase in CRASH_POINTS}
    webs = {
        phase: stack.start_web(
            f"web-crash-{phase}", workers=2, wait=False, PAYMENTS_CRASH_POINT=",".join(names)
        )
        for phase, names in armed.items()
    }
    for phase, web in webs.items():
        wait_until(web.up, timeout=120, what=f"gunicorn crashing at {phase}")
    booted_before = {phase: web.workers_booted() for phase, web in webs.items()}
    keys = {
        point: [f"crash-{stack.tag}-{point}-{i}" for i in range(runs)] for point in CRASH_POINTS
    }

    async def one_phase(phase: str) -> list[Answer]:
        """The phase's requests one at a time: each kills the worker that takes it."""
        url = webs[phase].url
        answers = await _crash_runs(url, api_key, keys[phase])
        for point in armed[phase][1:]:
            await _operation_crash_runs(url, api_key, operation_plan[point])
        return answers

    async def all_phases() -> list[list[Answer]]:
        return await asyncio.gather(*(one_phase(phase) for phase in CRASH_POINTS))

    sent_at = time.monotonic()
    answers = dict(zip(CRASH_POINTS, asyncio.run(all_phases()), strict=True))
    sending = time.monotonic() - sent_at
    time.sleep(2)  # let gunicorn log the last respawns
    crashes = {phase: webs[phase].workers_booted() - booted_before[phase] for phase in webs}
    answered = {p: sum(1 for a in answers[p] if a.status is not None) for p in CRASH_POINTS}
    answered |= {
        p: sum(1 for r in operation_plan[p] if r.answer is not None and r.answer.status is not None)
        for p in OPERATION_CRASH_POINTS
    }
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
    authorizations = [p for p in payments if p["reference"] in set(all_keys)]
    times = [(p["updated_at"] - p["created_at"]).total_seconds() for p in authorizations]

    # The operations: one per key, resolved as its run expects, here and at the sandbox.
    operations = stack.operations(since, merchant_id)
    operations_by_key: dict[str, list[dict]] = {}
    for operation in operations:
        operations_by_key.setdefault(operation["key"], []).append(operation)
    stats_after = stack.sandbox.stats()
    charges = {c["reference"]: c for c in stack.sandbox.listing("charges", since)}
    refunds: dict[str, list[dict]] = {}
    for refund in stack.sandbox.listing("refunds", since):
        refunds.setdefault(refund["reference"], []).append(refund)
    prepared = [r for r in operation_runs if r.payment_id is not None]
    operations_lost = [r.key for r in prepared if r.key not in operations_by_key]
    operations_doubled = [r.key for r in prepared if len(operations_by_key.get(r.key, [])) > 1]
    for run in prepared:
        found = operations_by_key.get(run.key, [])
        if len(found) == 1:
            why = _operation_wrong(run, found[0], stats_after, charges, refunds)
            if why:
                wrong.append(f"{run.key}: {'; '.join(why)}")
    operation_times = [(o["updated_at"] - o["created_at"]).total_seconds() for o in operations]

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
    replayed = [r for r in prepared if len(operations_by_key.get(r.key, [])) == 1]
    operation_replays = asyncio.run(_operation_replays(stack.web.url, api_key, replayed))
    for run, answer in zip(replayed, operation_replays, strict=True):
        why = _replay_wrong(run, operations_by_key[run.key][0], answer)
        if why:
            bad_replays.append(why)
    delta = sandbox_delta(stats_before, stack.sandbox.stats())
    audit = stack.audit(since, "crash")
    replays_total = len(all_keys) + len(replayed)

    result.figures.update(
        {
            "runs per crash point": runs,
            "crash points": f"{len(CRASH_POINTS)} authorization, "
            f"{len(OPERATION_CRASH_POINTS)} capture/void/refund",
            "requests": sum(len(a) for a in answers.values())
            + sum(1 for r in operation_runs if r.answer is not None),
            "faults injected (worker SIGKILLs seen)": crashes,
            "requests answered (expected 0)": {p: n for p, n in answered.items() if n} or "none",
            "acquirer requests": delta["acquirer_requests"],
            "acquirer faults": delta["faults"],
            "payments by final status": status_counts(payments),
            "operations by final status": dict(
                sorted(Counter(f"{o['kind']} {o['status']}" for o in operations).items())
            ),
            "still processing or pending": left,
            "payments resolved after crash, s (median / max)": f"{percentile(times, 0.5):.1f} / "
            f"{max(times, default=0):.1f}",
            "operations resolved after crash, s (median / max)": (
                f"{percentile(operation_times, 0.5):.1f} / {max(operation_times, default=0):.1f}"
            ),
            "sending / resolution wait, s": f"{sending:.1f} / {resolution:.1f}",
            "keys without payment or operation (lost)": len(lost) + len(operations_lost),
            "keys with several payments or operations": len(doubled) + len(operations_doubled),
            "replays of the final answer": f"{replays_total - len(bad_replays)}/{replays_total}",
        }
    )
    audit_figures(result, audit)
    result.check(not not_prepared, f"payments not made: {not_prepared[:5]}")
    result.check(left == 0, f"{left} payments or operations unresolved after the wait")
    lost += operations_lost
    doubled += operations_doubled
    result.check(not lost, f"{len(lost)} keys lost: {lost[:5]}")
    result.check(not doubled, f"{len(doubled)} keys with several payments: {doubled[:5]}")
    result.check(not wrong, f"{len(wrong)} resolved wrongly: {wrong[:5]}")
    result.check(not bad_replays, f"{len(bad_replays)} replays wrong: {bad_replays[:5]}")
    for point in points:
        result.check(
            answered[point] == 0, f"{point}: {answered[point]} requests were answered (no crash)"
        )
    for phase, names in armed.items():
        expected = runs * len(names)
        result.check(
            crashes[phase] >= expected,
            f"{phase}: {crashes[phase]} worker restarts for {expected} runs",
        )
    return result

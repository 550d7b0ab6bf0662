"""Failover campaign: two acquirers, alternating outages of ``alpha``, failover against none.

Two arms run at the same time, through two gunicorns of their own, against the same two
sandboxes and therefore under the very same fault schedule (wall-clock windows):

* ``failover``: ``ACQUIRERS`` names ``alpha`` (priority 10, the stack's sandbox) and ``beta``
  (priority 20, the stack's second sandbox): a payment alpha certainly did not take moves to
  beta;
* ``alpha only``: ``ACQUIRERS`` names ``alpha`` alone: the same payment is a ``503``.

Each arm has its own state namespace in Redis (its own breakers, budget and gate for alpha);
the stack's Celery worker, which knows both acquirers, reconciles both arms' payments. Both
arms send the same payments (tokens and the merchant's retry choices drawn from one seed), at
the same pace, from the same instant.

The fault schedule (:func:`schedule`) alternates a healthy window with one outage of alpha,
in this order, over and over, ambiguous and certain in turn: ``timeout_after_commit`` (every
alpha request held 4 s, above the 3 s read timeout, then processed: charges recorded after
the client gave up), ``503`` (an outage of ``POST /charges`` answering ``503`` before
processing), ``reset_after_commit`` (an outage of ``POST /charges`` recording the charge, then
resetting the connection) and ``refused`` (alpha's process stopped: the port refuses
connections, a real ``ECONNREFUSED``; restarted on its journal at the end of the window; it
never follows the held requests, which a stop would answer early). beta stays healthy.
The payments are ``tok_visa`` but for 8 % ``tok_decline`` (a result, never tried elsewhere)
and 2 % ``tok_timeout_after_commit`` (ambiguous wherever they are); a third of the ``202``
answers are retried by the merchant with the same key after ``Retry-After`` (a resumed
payment never moves).

The audit across acquirers reads both sandboxes' settlement listings
(``GET /_sandbox/charges``) and counts records per payment id (the reference sent). A
violation: a payment with records at two acquirers or two records at one; a record at an
acquirer other than the payment's ``acquirer``; a ``succeeded``/``declined`` payment without
exactly one matching record at its acquirer, a ``failed`` one with any record, a
``needs_review`` one with a record elsewhere; a payment still ``processing`` (lost); a record
of no payment; an attempt sent to another acquirer after an ambiguous one, or a switch for a
reason other than "certainly not applied"; an answer other than 201/202/502/503, or one
inconsistent with the payment's end; an arm-``alpha only`` payment anywhere but alpha.

The operator's ledger audit (``manage.py audit_acquirer``, per acquirer) runs over the same
payments as a second oracle. The figures compare the arms: of the ``tok_visa`` payments sent
during alpha's outages, the share answered ``201 succeeded`` at once, and the share
``succeeded`` in the end (after reconciliation), per outage and overall. Ratios from one run;
never asserted.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import gateway_client
from campaigns.client import Answer, ApiClient
from campaigns.harness import CampaignResult, Stack, Web, audit_figures, percentile

#: Alpha's outages, in the order the schedule cycles through them.
OUTAGES = ("timeout_after_commit", "503", "reset_after_commit", "refused")
ARMS = ("failover", "alpha only")
ALLOWED_ANSWERS = {201, 202, 502, 503}
#: Why a payment may have left an acquirer: it certainly did not take it.
CERTAIN = {"not_sent", "circuit_open"}
#: The gateway's errors after which a request may have been applied (its
#: ``AmbiguousOutcomeError`` family), by the class names the attempt log records.
AMBIGUOUS_ERRORS = frozenset(
    name
    for name in gateway_client.__all__
    if isinstance(cls := getattr(gateway_client, name), type)
    and issubclass(cls, gateway_client.AmbiguousOutcomeError)
)
#: The tokens the success rates count (approved wherever they go).
APPROVING = frozenset({"tok_visa"})
#: The sandbox's charge status for each final status of ours that has a record.
ACQUIRER_STATUS = {"succeeded": "approved", "declined": "declined"}
#: The alpha read timeout of the stack (``ACQUIRER_READ_TIMEOUT_SECONDS``, 3 s by default)
#: is below this hold, so every alpha request of the window times out after it is processed.
HOLD_MS = 4000


@dataclass(frozen=True)
class Window:
    """``kind`` (``healthy`` or one of :data:`OUTAGES`) from ``start`` to ``end``, seconds
    after the arms' start."""

    kind: str
    start: float
    end: float


def schedule(duration: float, *, outage_seconds: float, healthy_seconds: float) -> list[Window]:
    """Healthy and outage windows alternating, the outages cycling through :data:`OUTAGES`,
    until ``duration`` seconds are covered (the last window may run past it)."""
    windows: list[Window] = []
    at, index = 0.0, 0
    while at < duration:
        windows.append(Window("healthy", at, at + healthy_seconds))
        at += healthy_seconds
        kind = OUTAGES[index % len(OUTAGES)]
        windows.append(Window(kind, at, at + outage_seconds))
        at += outage_seconds
        index += 1
    return windows


def window_at(windows: list[Window], moment: float) -> str:
    for window in windows:
        if window.start <= moment < window.end:
            return window.kind
    return "healthy"


@dataclass
class Sent:
    arm: str
    index: int
    key: str
    token: str
    retry_202: bool
    body: dict
    at: float = 0.0  #: seconds after the start, when the first request went out
    window: str = "healthy"
    answers: list[Answer] = field(default_factory=list)


def _plan(payments: int, seed: int) -> list[tuple[str, bool]]:
    """(token, retry a 202) per payment index: one draw for both arms."""
    rng = random.Random(seed)
    plan = []
    for _ in range(payments):
        draw = rng.random()
        token = (
            "tok_decline"
            if draw < 0.08
            else "tok_timeout_after_commit"
            if draw < 0.10
            else "tok_visa"
        )
        plan.append((token, rng.random() < 0.33))
    return plan


async def _faults(stack: Stack, windows: list[Window], started: float, log: list[str]) -> None:
    """Apply each outage window on alpha at its start, lift it at its end."""
    alpha = stack.sandbox
    assert alpha is not None
    for window in windows:
        if window.kind == "healthy":
            continue
        await asyncio.sleep(max(0.0, started + window.start - time.monotonic()))
        if window.kind == "refused":
            await asyncio.to_thread(alpha.down)
        elif window.kind == "503":
            await asyncio.to_thread(
                alpha.set_condition, "outage", duration_seconds=3600, failure=503,
                retry_after=1, endpoints=["POST /charges"],
            )  # fmt: skip
        elif window.kind == "timeout_after_commit":
            await asyncio.to_thread(
                alpha.set_condition, "latency", distribution="fixed", ms=HOLD_MS
            )
        else:
            await asyncio.to_thread(
                alpha.set_condition, "outage", duration_seconds=3600, failure="reset",
                phase="after_commit", endpoints=["POST /charges"],
            )  # fmt: skip
        log.append(f"{window.kind} {time.monotonic() - started:.1f}s")
        await asyncio.sleep(max(0.0, started + window.end - time.monotonic()))
        if window.kind == "refused":
            await asyncio.to_thread(alpha.up)
        else:
            await asyncio.to_thread(alpha.clear_conditions)


async def _pay(api: ApiClient, item: Sent) -> None:
    answer = await api.create(item.key, item.body)
    item.answers.append(answer)
    if answer.status == 202 and item.retry_202:
        await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
        item.answers.append(await api.create(item.key, item.body))


async def _run_arms(
    stack: Stack,
    webs: dict[str, Web],
    api_key: str,
    items: dict[str, list[Sent]],
    windows: list[Window],
    pace: float,
) -> list[str]:
    apis = {
        arm: ApiClient(web.url, api_key, max_connections=64, timeout=60)
        for arm, web in webs.items()
    }
    log: list[str] = []
    started = time.monotonic()
    faults = asyncio.create_task(_faults(stack, windows, started, log))
    tasks = []
    try:
        for index in range(len(items[ARMS[0]])):
            await asyncio.sleep(max(0.0, started + index / pace - time.monotonic()))
            for arm in ARMS:
                item = items[arm][index]
                item.at = time.monotonic() - started
                item.window = window_at(windows, item.at)
                tasks.append(asyncio.create_task(_pay(apis[arm], item)))
        await asyncio.gather(*tasks)
        await faults
    finally:
        if not faults.done():
            faults.cancel()
        for api in apis.values():
            await api.close()
    return log


def _restore_alpha(stack: Stack) -> None:
    """alpha up (the schedule may have ended inside a refused window) and without conditions."""
    assert stack.sandbox is not None
    if not stack.sandbox.alive():
        stack.sandbox.up()
    stack.sandbox.clear_conditions()


def _stop(webs: list[Web]) -> None:
    """Quick shutdown (SIGINT) of the arms' gunicorns, in parallel: every answer is in."""
    for web in webs:
        if web.alive():
            web.popen.send_signal(signal.SIGINT)
    for web in webs:
        web.stop()


def _payments(stack: Stack, since: datetime, merchant_id: int) -> dict[str, list[dict[str, Any]]]:
    """The merchant's payments since ``since`` by reference (each payment's own, the key it
    was sent with: a payment that failed unsent has released its key)."""
    rows = stack.sql(
        "SELECT id, status, failure_code, acquirer, reference FROM payments_payment "
        "WHERE created_at >= %s AND merchant_id = %s ORDER BY created_at",
        [since, merchant_id],
    )
    columns = ("id", "status", "failure_code", "acquirer", "reference")
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(row[4], []).append(dict(zip(columns, row, strict=True)))
    return found


def _events(stack: Stack, ids: list[str]) -> dict[str, list[tuple[str, dict]]]:
    """Each payment's ``acquirer_attempt`` and ``acquirer_switched`` events, in order."""
    found: dict[str, list[tuple[str, dict]]] = {}
    if not ids:
        return found
    rows = stack.sql(
        "SELECT payment_id, type, data FROM payments_paymentevent WHERE payment_id = ANY(%s) "
        "AND type IN ('acquirer_attempt', 'acquirer_switched') ORDER BY id",
        [ids],
    )
    for payment_id, kind, data in rows:
        found.setdefault(payment_id, []).append((kind, data or {}))
    return found


def _route_problems(events: list[tuple[str, dict]]) -> tuple[list[str], bool]:
    """What is wrong with a payment's attempts (sent elsewhere after an ambiguous request, a
    switch for an uncertain reason), and whether one of its requests was ambiguous (a call's
    outcome ``unknown``, or any request of its attempt log, the gateway's same-key retries
    included, ending in an ambiguous error)."""
    problems, ambiguous_at = [], None
    for kind, data in events:
        if kind == "acquirer_attempt":
            where = data.get("acquirer")
            if ambiguous_at is not None and where != ambiguous_at:
                problems.append(f"sent to {where} after an ambiguous attempt at {ambiguous_at}")
            steps = data.get("attempt_log") or []
            ambiguous = data.get("outcome") == "unknown" or any(
                step.get("error") in AMBIGUOUS_ERRORS for step in steps
            )
            if ambiguous and ambiguous_at is None:
                ambiguous_at = where
        elif data.get("reason") not in CERTAIN:
            problems.append(f"switched {data.get('from_acquirer')}->{data.get('to_acquirer')} "
                            f"after {data.get('reason')}")  # fmt: skip
    return problems, ambiguous_at is not None


def _answer_problem(answer: Answer, payment: dict | None) -> str | None:
    if answer.status not in ALLOWED_ANSWERS:
        return f"answer {answer.status or answer.error}"
    data = answer.json() or {}
    if answer.status in (201, 202) and payment is None:
        return f"{answer.status} but no payment"
    if answer.status == 201 and payment is not None and data.get("status") != payment["status"]:
        return f"201 {data.get('status')} but the payment ended {payment['status']}"
    if answer.status == 503:
        if data.get("code") != "acquirer_unavailable":
            return f"503 {data.get('code')}"
        if payment is not None and (payment["status"], payment["failure_code"]) not in {
            ("failed", "acquirer_unavailable"),
            ("failed", "circuit_open"),
        }:
            return f"503 but the payment ended {payment['status']}"
    return None


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} = {part / whole:.2f}" if whole else "0/0"


def run(
    stack: Stack,
    *,
    payments: int = 1000,
    pace: float = 8.0,
    outage_seconds: float = 6.0,
    healthy_seconds: float = 4.0,
    seed: int = 16,
    web_workers: int = 2,
    web_threads: int = 8,
    merchant: str = "failover",
) -> CampaignResult:
    """``payments`` per arm (both arms send the same ones, ``pace`` a second each) under
    :func:`schedule`; see the module docstring for what is checked and printed."""
    result = CampaignResult("failover")
    assert stack.sandbox is not None and stack.beta is not None
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant(merchant)
    booting = time.monotonic()
    arm_env = {
        "failover": stack.acquirers_json("alpha", "beta"),
        "alpha only": stack.acquirers_json("alpha"),
    }
    webs = {}
    for number, arm in enumerate(ARMS):
        webs[arm] = stack.start_web(
            f"web-failover-{number}",
            workers=web_workers,
            threads=web_threads,
            wait=False,
            ACQUIRERS=arm_env[arm],
            ACQUIRER_STATE_NAMESPACE=f"{stack.namespace}:arm{number}",
        )
    for web in webs.values():
        deadline = time.monotonic() + 60
        while not web.up():
            if time.monotonic() > deadline:
                result.violations.append(f"{web.name} did not start")
                return result
            time.sleep(0.2)
    booted = time.monotonic() - booting
    plan = _plan(payments, seed)
    items = {
        arm: [
            Sent(
                arm,
                i,
                f"fo-{stack.tag}-{n}-{i}",
                token,
                retry,
                {
                    "amount": 1000 + i,
                    "currency": "EUR",
                    "payment_method": token,
                    "reference": f"fo-{stack.tag}-{n}-{i}",
                },
            )
            for i, (token, retry) in enumerate(plan)
        ]
        for n, arm in enumerate(ARMS)
    }
    windows = schedule(
        payments / pace, outage_seconds=outage_seconds, healthy_seconds=healthy_seconds
    )
    started = time.monotonic()
    try:
        fault_log = asyncio.run(_run_arms(stack, webs, api_key, items, windows, pace))
        sending = time.monotonic() - started
    finally:
        _restore_alpha(stack)
        _stop(list(webs.values()))
    waited = time.monotonic()
    left = stack.wait_resolved(since, timeout=90)
    resolution = time.monotonic() - waited

    found = _payments(stack, since, merchant_id)
    events = _events(stack, [p["id"] for rows in found.values() for p in rows])
    listings = {
        "alpha": stack.sandbox.listing("charges", since),
        "beta": stack.beta.listing("charges", since),
    }
    records: dict[str, dict[str, list[dict]]] = {}
    for acquirer, rows in listings.items():
        for row in rows:
            records.setdefault(row["reference"], {}).setdefault(acquirer, []).append(row)
    ours = {p["id"] for rows in found.values() for p in rows}
    unknown = [ref for ref in records if ref not in ours]
    if unknown:  # records of other campaigns' payments (read from a minute before) are not lost
        known = {row[0] for row in stack.sql(
            "SELECT id FROM payments_payment WHERE id = ANY(%s)", [unknown])}  # fmt: skip
        unknown = [ref for ref in unknown if ref not in known]

    problems: list[str] = []
    two_acquirers = duplicates = lost = ambiguous_kept = 0
    per_arm_status: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    per_arm_acquirer: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    answers: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    # rates[arm][window] = [tok_visa sent, 201 succeeded at once, succeeded in the end]
    rates: dict[str, dict[str, list[int]]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for item in items[arm]:
            written = found.get(item.key, [])
            if len(written) > 1:
                problems.append(f"{item.key} ({arm}): {len(written)} payments for one key")
            payment = written[-1] if written else None
            for answer in item.answers:
                answers[arm][str(answer.status or answer.error)] += 1
                why = _answer_problem(answer, payment)
                if why:
                    problems.append(f"{item.key} ({arm}, {item.window}, {item.token}): {why}")
            if item.token in APPROVING:
                counts = rates[arm].setdefault(item.window, [0, 0, 0])
                counts[0] += 1
                first = item.answers[0] if item.answers else None
                if (
                    first is not None
                    and first.status == 201
                    and (first.json() or {}).get("status") == "succeeded"
                ):
                    counts[1] += 1
                if payment is not None and payment["status"] == "succeeded":
                    counts[2] += 1
            if payment is None:
                per_arm_status[arm]["not written (503 before anything was written)"] += 1
                continue
            status = payment["status"]
            per_arm_status[arm][
                status + (f"/{payment['failure_code']}" if payment["failure_code"] else "")
            ] += 1
            per_arm_acquirer[arm][payment["acquirer"]] += 1
            held = records.get(payment["id"], {})
            at = {acquirer: len(rows) for acquirer, rows in held.items()}
            where = f"{item.key} {payment['id']} ({arm}, {item.window}, {item.token}, {status})"
            if len(at) > 1:
                two_acquirers += 1
                problems.append(f"{where}: authorized at {sorted(at)}")
            if any(n > 1 for n in at.values()):
                duplicates += 1
                problems.append(f"{where}: {at} records")
            elsewhere = [a for a in at if a != payment["acquirer"]]
            if elsewhere:
                problems.append(f"{where}: records at {elsewhere}, the payment is at "
                                f"{payment['acquirer']}")  # fmt: skip
            if arm == "alpha only" and payment["acquirer"] != "alpha":
                problems.append(f"{where}: at {payment['acquirer']} with alpha alone configured")
            own = held.get(payment["acquirer"], [])
            if status == "processing":
                lost += 1
                problems.append(f"{where}: still processing")
            elif status in ("succeeded", "declined"):
                if [row["status"] for row in own] != [ACQUIRER_STATUS[status]]:
                    lost += 1
                    problems.append(f"{where}: its acquirer holds {[r['status'] for r in own]}")
            elif status == "failed" and at:
                problems.append(f"{where}: failed, but recorded at {sorted(at)}")
            route_problems, ambiguous = _route_problems(events.get(payment["id"], []))
            problems.extend(f"{where}: {why}" for why in route_problems)
            ambiguous_kept += ambiguous and not route_problems
    lost += len(unknown)
    problems.extend(f"a charge of no payment: reference {ref}" for ref in unknown[:10])

    switched = sum(
        1 for evs in events.values() if any(kind == "acquirer_switched" for kind, _ in evs)
    )
    result.figures.update(
        {
            "payments per arm (the same tokens, pace, schedule)": payments,
            "pace, payments/s per arm": pace,
            "schedule": f"{healthy_seconds:g} s healthy, then {outage_seconds:g} s of "
            + ", ".join(OUTAGES)
            + " in turn",
            "alpha's outages applied": len(fault_log),
            "the arms' gunicorns up, s": round(booted, 1),
            "sending (until the last answer), s": round(sending, 1),
            "resolution wait, s": round(resolution, 1),
            "authorized at two acquirers": two_acquirers,
            "two records at one acquirer": duplicates,
            "lost (processing, missing at its acquirer, record of no payment)": lost,
            "payments with an ambiguous request, kept at that acquirer": ambiguous_kept,
            "payments moved alpha -> beta after a certain failure": switched,
        }
    )
    for arm in ARMS:
        result.figures[f"{arm}: answers"] = dict(sorted(answers[arm].items()))
        result.figures[f"{arm}: payments by final status"] = dict(
            sorted(per_arm_status[arm].items())
        )
        result.figures[f"{arm}: payments by acquirer"] = dict(sorted(per_arm_acquirer[arm].items()))
        seconds = [a.seconds for item in items[arm] for a in item.answers]
        result.figures[f"{arm}: answer time p50 / p99 / max, s"] = " / ".join(
            f"{percentile(seconds, q):.2f}" for q in (0.5, 0.99, 1.0)
        )
    for label, column in (("201 succeeded at once", 1), ("succeeded in the end", 2)):
        for arm in ARMS:
            outage = [rates[arm].get(kind, [0, 0, 0]) for kind in OUTAGES]
            result.figures[f"during outages, {label}: {arm}"] = _rate(
                sum(c[column] for c in outage), sum(c[0] for c in outage)
            )
        for kind in (*OUTAGES, "healthy"):
            result.figures[f"  {kind}, {label}"] = {
                arm: _rate(*(lambda c: (c[column], c[0]))(rates[arm].get(kind, [0, 0, 0])))
                for arm in ARMS
            }
    with_rate = [rates["failover"].get(k, [0, 0, 0]) for k in OUTAGES]
    without_rate = [rates["alpha only"].get(k, [0, 0, 0]) for k in OUTAGES]
    w = sum(c[1] for c in with_rate) / max(1, sum(c[0] for c in with_rate))
    wo = sum(c[1] for c in without_rate) / max(1, sum(c[0] for c in without_rate))
    result.figures["success at once during outages, failover / alpha only"] = (
        f"{w / wo:.2f}x" if wo else f"{w:.2f} vs 0"
    )
    # The operator's audit, per acquirer (each one's records against the payments it holds).
    audit_figures(result, stack.audit(since, "failover"))
    result.check(left == 0, f"{left} payments or operations still unresolved")
    result.violations.extend(problems[:40])
    if len(problems) > 40:
        result.violations.append(f"... {len(problems) - 40} more problems")
    return result

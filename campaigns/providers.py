"""Three-provider fault campaign: a sandbox, a Stripe-compatible and an Adyen-compatible
acquirer, alternating outages, failover against single providers in the same run.

The stack's acquirers (campaigns/harness.py): ``alpha`` (the sandbox), ``stripe`` (localstripe,
a separate process, behind a fault proxy) and ``adyen`` (the Adyen-compatible fake of
tests/support, behind its own). Two arms run at the same time, through two gunicorns of their
own, under the very same fault schedule (wall-clock windows):

* ``failover``: ``ACQUIRERS`` names the three, the Adyen fake declared to charge the sandbox's
  ``tok_`` tokens too (ADR 0051): a ``tok_`` payment alpha certainly did not take moves to
  adyen;
* ``single provider``: the same three with each type's own families only: every payment can go
  to one provider, the one of its token's family.

Both arms send the same payments (from one seed, at one pace, from one instant): half
``tok_visa`` (alpha, then adyen in the failover arm), a quarter ``pm_card_visa`` (stripe only),
a quarter ``spm_visa`` (adyen only), each captured at once; a third of those answered ``201
succeeded`` get a refund of 100 at once (re-sent with its key after a ``503`` or a ``202``).

The schedule alternates a healthy window with one outage, cycling through :data:`OUTAGES`:
alpha refusing connections (its process stopped) or answering ``503`` (certain: a ``tok_``
payment may move), stripe and adyen answering ``429`` (certain) or ``500`` (ambiguous: the
payment stays and is reconciled there). Afterwards the Adyen fake's signed notifications are
delivered to the service's endpoint, as Adyen would (its refunds are ``received`` until then).

The oracle is each provider's own books: the sandbox's settlement listings, localstripe's
listings of PaymentIntents and refunds, the Adyen fake's payments and modifications. A
violation: a payment approved at two providers or twice at one (authorized twice); a payment
``succeeded`` without exactly one approval at its acquirer, ``failed`` with one anywhere,
still ``processing``, or an approval of no payment (lost); a refund applied twice (doubled),
``succeeded`` with no refund at the provider, or a refund at the provider we do not hold as
succeeded; an operation not final (``processing``, ``pending``, ``needs_review``); an answer
other than 201/202/503; a payment of the single-provider arm at another provider than its
family's. The work is asserted: payments and charges at each provider, a failover done. The
figures compare the arms: of the ``tok_visa`` payments sent during alpha's outages, the share
answered ``201 succeeded`` at once, per arm (measured, printed, not asserted).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from campaigns.client import Answer, ApiClient
from campaigns.harness import CampaignResult, Stack, Web, audit_figures

#: (provider, fault), in the order the schedule cycles through them.
OUTAGES = (
    ("alpha", "refused"), ("stripe", "429"), ("adyen", "500"),
    ("alpha", "503"), ("stripe", "500"), ("adyen", "429"),
)  # fmt: skip
ARMS = ("failover", "single provider")
#: Each token's provider when it has one only (its family's, ADR 0051).
HOME = {"tok_visa": "alpha", "pm_card_visa": "stripe", "spm_visa": "adyen"}
ALLOWED_ANSWERS = {201, 202, 503}
#: The tokens two acquirers of the failover arm can charge: the success rates count them.
SHARED = frozenset({"tok_visa"})
REFUND = 100
_STRIPE_ERROR = json.dumps({"error": {"type": "api_error", "message": "outage"}}).encode()
_ADYEN_ERROR = json.dumps(
    {"status": 500, "errorCode": "905", "message": "outage", "errorType": "internal"}
).encode()


@dataclass(frozen=True)
class Window:
    """``outage`` (a pair of :data:`OUTAGES`, None: healthy) from ``start`` to ``end``,
    seconds after the arms' start."""

    outage: tuple[str, str] | None
    start: float
    end: float


def schedule(duration: float, *, outage_seconds: float, healthy_seconds: float) -> list[Window]:
    """Healthy and outage windows alternating, the outages cycling through :data:`OUTAGES`,
    until ``duration`` seconds are covered."""
    windows, at, index = [], 0.0, 0
    while at < duration:
        windows.append(Window(None, at, at + healthy_seconds))
        at += healthy_seconds
        windows.append(Window(OUTAGES[index % len(OUTAGES)], at, at + outage_seconds))
        at += outage_seconds
        index += 1
    return windows


@dataclass
class Sent:
    arm: str
    key: str
    token: str
    refund: bool
    body: dict
    window: tuple[str, str] | None = None
    answers: list[Answer] = field(default_factory=list)
    refund_answers: list[Answer] = field(default_factory=list)


def _plan(payments: int, seed: int) -> list[tuple[str, bool]]:
    """(token, refund it when it succeeds) per payment index: one draw for both arms."""
    rng = random.Random(seed)
    tokens = ("tok_visa", "tok_visa", "pm_card_visa", "spm_visa")
    return [(rng.choice(tokens), rng.random() < 1 / 3) for _ in range(payments)]


def _apply(stack: Stack, outage: tuple[str, str], on: bool) -> None:
    """Start (``on``) or lift one outage."""
    provider, fault = outage
    alpha = stack.sandbox
    assert alpha is not None and stack.stripe_proxy is not None and stack.adyen_proxy is not None
    if provider == "alpha" and fault == "refused":
        if on:
            alpha.down()
        else:
            alpha.up()
    elif provider == "alpha":
        if on:
            alpha.set_condition("outage", duration_seconds=3600, failure=503, retry_after=1,
                                endpoints=["POST /charges"])  # fmt: skip
        else:
            alpha.clear_conditions()
    else:
        proxy = stack.stripe_proxy if provider == "stripe" else stack.adyen_proxy
        body = _STRIPE_ERROR if provider == "stripe" else _ADYEN_ERROR
        headers = {"Content-Type": "application/json"}
        proxy.outage(("answer", int(fault), headers, body) if on else None)


async def _faults(stack: Stack, windows: list[Window], started: float, log: list[str]) -> None:
    for window in windows:
        if window.outage is None:
            continue
        await asyncio.sleep(max(0.0, started + window.start - time.monotonic()))
        await asyncio.to_thread(_apply, stack, window.outage, True)
        log.append(f"{'/'.join(window.outage)} {time.monotonic() - started:.1f}s")
        await asyncio.sleep(max(0.0, started + window.end - time.monotonic()))
        await asyncio.to_thread(_apply, stack, window.outage, False)


async def _pay(api: ApiClient, item: Sent) -> None:
    answer = await api.create(item.key, item.body)
    item.answers.append(answer)
    data = answer.json() or {}
    if not (answer.status == 201 and data.get("status") == "succeeded" and item.refund):
        return
    for _ in range(2):  # the first try, and once more with the same key after a 503 or 202
        refunded = await api.request(
            "POST", f"/payments/{data['id']}/refunds", json={"amount": REFUND},
            headers={"Idempotency-Key": f"{item.key}-refund"},
        )  # fmt: skip
        item.refund_answers.append(refunded)
        if refunded.status not in (202, 503):
            return
        await asyncio.sleep(float(refunded.headers.get("retry-after", "1")))


async def _run_arms(
    stack: Stack, webs: dict[str, Web], api_key: str, items: dict[str, list[Sent]],
    windows: list[Window], pace: float,
) -> list[str]:  # fmt: skip
    apis = {arm: ApiClient(web.url, api_key, max_connections=64, timeout=60)
            for arm, web in webs.items()}  # fmt: skip
    log: list[str] = []
    started = time.monotonic()
    faults = asyncio.create_task(_faults(stack, windows, started, log))
    tasks = []
    try:
        for index in range(len(items[ARMS[0]])):
            await asyncio.sleep(max(0.0, started + index / pace - time.monotonic()))
            at = time.monotonic() - started
            window = next((w.outage for w in windows if w.start <= at < w.end), None)
            for arm in ARMS:
                items[arm][index].window = window
                tasks.append(asyncio.create_task(_pay(apis[arm], items[arm][index])))
        await asyncio.gather(*tasks)
        await faults
    finally:
        if not faults.done():
            faults.cancel()
        for api in apis.values():
            await api.close()
    return log


def _restore(stack: Stack) -> None:
    """Every provider up and without outage, whatever window the schedule ended in."""
    assert stack.sandbox is not None and stack.stripe_proxy and stack.adyen_proxy
    if not stack.sandbox.alive():
        stack.sandbox.up()
    stack.sandbox.clear_conditions()
    stack.stripe_proxy.outage(None)
    stack.adyen_proxy.outage(None)


def _resolve(stack: Stack, web: Web, since: datetime, timeout: float) -> int:
    """Deliver the Adyen fake's signed notifications to the service (as Adyen retries them)
    until nothing since ``since`` is unresolved, an operation in ``needs_review`` included: an
    Adyen refund older than ``RECONCILIATION_MAX_AGE_SECONDS`` (16 s here, reached on a loaded
    machine before the sending ends) is given up by reconciliation, which cannot look it up,
    and its notification then settles it; how many still are after ``timeout``."""
    assert stack.adyen is not None
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=web.url, timeout=30, trust_env=False) as http:
        while True:
            http.post("/acquirer_notifications/adyen", content=stack.adyen.notifications(),
                      headers={"Content-Type": "application/json"})  # fmt: skip
            left = stack.wait_resolved(since, timeout=2, operations_in_review=True)
            if left == 0 or time.monotonic() > deadline:
                return left


def _books(stack: Stack, since: datetime) -> tuple[dict, dict]:
    """Each provider's own books: approvals by our payment id and applied refunds by our
    refund id, each as ``{reference: Counter(provider -> count)}``."""
    assert stack.sandbox is not None and stack.stripe is not None and stack.adyen is not None
    approved: dict[str, Counter] = {}
    refunded: dict[str, Counter] = {}
    for row in stack.sandbox.listing("charges", since):
        if row["status"] == "approved":
            approved.setdefault(row["reference"], Counter())["alpha"] += 1
    for row in stack.sandbox.listing("refunds", since):
        if row["status"] == "succeeded":
            refunded.setdefault(row["reference"], Counter())["alpha"] += 1
    for pi in stack.stripe.payment_intents():
        reference = (pi.get("metadata") or {}).get("payment_reference")
        if pi["status"] in ("succeeded", "requires_capture"):
            approved.setdefault(reference or pi["id"], Counter())["stripe"] += 1
        for refund in stack.stripe.refunds(pi["id"]) if pi["status"] == "succeeded" else ():
            ours = (refund.get("metadata") or {}).get("refund_reference")
            if refund["status"] == "succeeded":
                refunded.setdefault(ours or refund["id"], Counter())["stripe"] += 1
    for payment in stack.adyen.payments():
        if payment["resultCode"] == "Authorised":
            approved.setdefault(payment["merchantReference"], Counter())["adyen"] += 1
        for modification in payment["modifications"]:
            if modification["type"] == "refunds" and modification["success"]:
                refunded.setdefault(modification["reference"], Counter())["adyen"] += 1
    return approved, refunded


def run(
    stack: Stack,
    *,
    payments: int = 600,
    pace: float = 8.0,
    outage_seconds: float = 3.0,
    healthy_seconds: float = 2.0,
    seed: int = 28,
    web_workers: int = 2,
    web_threads: int = 8,
    merchant: str = "providers",
) -> CampaignResult:
    """``payments`` per arm (both arms send the same ones, ``pace`` a second each) under
    :func:`schedule`; see the module docstring for what is checked and printed."""
    result = CampaignResult("providers")
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant(merchant)
    arm_acquirers = {
        "failover": stack.acquirers_json(
            "alpha", "stripe", "adyen", adyen_takes_sandbox_tokens=True
        ),
        "single provider": stack.acquirers_json("alpha", "stripe", "adyen"),
    }
    webs = {
        arm: stack.start_web(f"web-providers-{n}", workers=web_workers, threads=web_threads,
                             wait=False, ACQUIRERS=arm_acquirers[arm],
                             ACQUIRER_STATE_NAMESPACE=f"{stack.namespace}:providers{n}")
        for n, arm in enumerate(ARMS)
    }  # fmt: skip
    for web in webs.values():
        deadline = time.monotonic() + 60
        while not web.up():
            if time.monotonic() > deadline:
                result.violations.append(f"{web.name} did not start")
                return result
            time.sleep(0.2)
    items = {
        arm: [
            Sent(arm, f"pv-{stack.tag}-{n}-{i}", token, refund,
                 {"amount": 1000 + i, "currency": "EUR", "payment_method": token,
                  "reference": f"pv-{stack.tag}-{n}-{i}"})
            for i, (token, refund) in enumerate(_plan(payments, seed))
        ]
        for n, arm in enumerate(ARMS)
    }  # fmt: skip
    windows = schedule(payments / pace, outage_seconds=outage_seconds,
                       healthy_seconds=healthy_seconds)  # fmt: skip
    started = time.monotonic()
    try:
        fault_log = asyncio.run(_run_arms(stack, webs, api_key, items, windows, pace))
        sending = time.monotonic() - started
    finally:
        _restore(stack)
    try:
        left = _resolve(stack, webs["failover"], since, timeout=90)
    finally:
        for web in webs.values():
            web.stop()
    _judge(stack, result, items, since, merchant_id, left)
    result.figures["outages applied"] = len(fault_log)
    result.figures["sending (until the last answer), s"] = round(sending, 1)
    audit_figures(result, stack.audit(since, "providers"))
    return result


def _unknown(stack: Stack, table: str, references: list[str]) -> list[str]:
    """The ``references`` that are the id of no row of ``table`` (a payment or an operation of
    any campaign of the stack)."""
    if not references:
        return []
    query = f"SELECT id FROM {table} WHERE id = ANY(%s)"  # noqa: S608 - table: ours, a constant
    known = {row[0] for row in stack.sql(query, [references])}
    return [reference for reference in references if reference not in known]


def _judge(
    stack: Stack, result: CampaignResult, items: dict[str, list[Sent]], since: datetime,
    merchant_id: int, left: int,
) -> None:  # fmt: skip
    """Every payment and refund of both arms against the providers' books (module docstring)."""
    approved, refunded = _books(stack, since)
    rows = stack.sql(
        "SELECT p.reference, p.id, p.status, p.acquirer, "
        "(SELECT count(*) FROM payments_paymentevent e WHERE e.payment_id = p.id "
        "AND e.type = 'acquirer_switched') FROM payments_payment p "
        "WHERE p.created_at >= %s AND p.merchant_id = %s", [since, merchant_id],
    )  # fmt: skip
    payments = {row[0]: row[1:] for row in rows}
    refunds = dict(stack.sql(
        "SELECT o.id, o.status FROM payments_paymentoperation o JOIN payments_payment p "
        "ON p.id = o.payment_id WHERE o.kind = 'refund' AND p.merchant_id = %s "
        "AND o.created_at >= %s", [merchant_id, since],
    ))  # fmt: skip
    problems: list[str] = []
    twice = lost = doubled = moved = 0
    by_provider: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    rates = {arm: [0, 0] for arm in ARMS}  # tok_visa during alpha's outages: sent, 201 at once
    for arm in ARMS:
        for item in items[arm]:
            where = f"{item.key} ({arm}, {item.token}, {item.window})"
            for answer in (*item.answers, *item.refund_answers):
                if answer.status not in ALLOWED_ANSWERS:
                    problems.append(f"{where}: answer {answer.status or answer.error}")
            if item.token in SHARED and item.window and item.window[0] == "alpha":
                first = item.answers[0]
                rates[arm][0] += 1
                rates[arm][1] += first.status == 201 and (first.json() or {}).get("status") == (
                    "succeeded"
                )
            if item.key not in payments:
                continue  # a 503 before anything was written
            payment_id, status, acquirer, switched = payments[item.key]
            moved += bool(switched)
            held = approved.pop(payment_id, Counter())
            if sum(held.values()) > 1:
                twice += 1
                problems.append(f"{where}: approved {dict(held)}")
            if status == "succeeded":
                by_provider[arm][acquirer] += 1
                if held != Counter({acquirer: 1}):
                    lost += 1
                    problems.append(f"{where}: succeeded at {acquirer}, the books: {dict(held)}")
            elif status in ("processing", "needs_review"):
                problems.append(f"{where}: {status}, not final")
            elif held:
                problems.append(f"{where}: {status} but approved at {dict(held)}")
            if arm == "single provider" and acquirer != HOME[item.token]:
                problems.append(f"{where}: at {acquirer}, its only provider is {HOME[item.token]}")
    # The sandbox's listing starts a minute early: other campaigns' payments are not lost.
    strangers = _unknown(stack, "payments_payment", list(approved))
    lost += len(strangers)
    problems.extend(f"an approval of no payment of ours: {ref}" for ref in strangers[:10])
    for refund_id, status in refunds.items():
        applied = refunded.pop(refund_id, Counter())
        doubled += sum(applied.values()) > 1
        if (status, sum(applied.values())) not in (("succeeded", 1), ("failed", 0)):
            problems.append(f"refund {refund_id}: {status} here, {dict(applied)} at the providers")
    strangers = _unknown(stack, "payments_paymentoperation", list(refunded))
    problems.extend(f"a refund of no refund of ours: {ref}" for ref in strangers[:10])
    charges = Counter()
    for arm in ARMS:
        charges.update(by_provider[arm])
    result.figures.update({
        "payments per arm": len(items[ARMS[0]]),
        "authorized twice": twice,
        "lost (not final, missing at its provider, approval of no payment)": lost,
        "refunds doubled": doubled,
        "refunds made": len(refunds),
        "payments moved to another provider (failover arm)": moved,
        "unresolved at the end": left,
    })  # fmt: skip
    for arm in ARMS:
        result.figures[f"{arm}: succeeded payments by provider"] = dict(
            sorted(by_provider[arm].items())
        )
        sent, at_once = rates[arm]
        result.figures[f"{arm}: tok_visa during alpha's outages, 201 succeeded at once"] = (
            f"{at_once}/{sent} = {at_once / sent:.2f}" if sent else "0/0"
        )
    result.check(twice == 0 and lost == 0 and doubled == 0, "authorized twice, lost or doubled")
    result.check(left == 0, f"{left} payments or operations still unresolved")
    result.check(moved > 0, "no payment failed over: the campaign did not test failover")
    for provider in ("alpha", "stripe", "adyen"):
        result.check(charges[provider] > 0, f"no payment succeeded at {provider}")
    result.check(len(refunds) > 0, "no refund was made")
    result.violations.extend(problems[:40])
    if len(problems) > 40:
        result.violations.append(f"... {len(problems) - 40} more problems")

"""Webhooks under the fault matrix: every state change reaches both endpoints, verifiably.

The fault matrix (:mod:`campaigns.matrix`, every sandbox token under every acquirer-wide
condition, with captures and refunds) runs for a merchant of its own that has two webhook
endpoints, both :class:`webhooks.receiver.VerifyingReceiver` servers in this process: a
steady one, and a flaky one answering ``500`` to half of the deliveries (a seeded random
draw). The stack compresses the retry schedule to seconds (``WEBHOOK_RETRY_SCHEDULE_SECONDS``
in the harness's service settings) so the flaky endpoint drains within the campaign.

Checks, after the matrix's own (which stay violations here too) and once no delivery to either
endpoint is pending:

* exactly once in the outbox: per payment, its events are exactly its changes into a status
  with an event type (from the payments' own timeline), and each final refund has its event;
* at least once at each receiver: every event of the merchant verified by ``standardwebhooks``
  at both endpoints (none missing), nothing unknown received, no bad signature, no delivery
  ``failed``; duplicates (the same ``webhook-id`` twice) are counted, not forbidden.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from campaigns import matrix
from campaigns.harness import CampaignResult, Stack
from webhooks.receiver import VerifyingReceiver, register

#: Payment statuses whose change writes an event
#: (payments.core.payment_states.PAYMENT_WEBHOOK_EVENTS).
EVENT_STATUSES = (
    "succeeded", "requires_capture", "declined", "failed", "canceled", "needs_review",
)  # fmt: skip


def run(
    stack: Stack,
    *,
    payments: int = 1000,
    concurrency: int = 16,
    seed: int = 13,
    recovery_timeout: float = 0.0,
    pace: float | None = None,
    fail_rate: float = 0.5,
    drain_timeout: float = 300.0,
) -> CampaignResult:
    result = CampaignResult("webhooks")
    steady = VerifyingReceiver(path="/steady").start()
    flaky = VerifyingReceiver(path="/flaky", fail_rate=fail_rate, rng=random.Random(seed)).start()
    receivers = {"steady": steady, "flaky": flaky}
    registered: dict[str, Any] = {}

    def register_endpoints(merchant_id: int, api_key: str) -> None:
        assert stack.web is not None
        registered["merchant_id"] = merchant_id
        for name, receiver in receivers.items():
            endpoint_id, secret = register(stack.web.url, api_key, receiver.url)
            receiver.secrets.append(secret)
            registered[name] = endpoint_id

    try:
        played = matrix.run(
            stack, payments=payments, concurrency=concurrency, recovery_timeout=recovery_timeout,
            pace=pace, merchant="webhooks", on_merchant=register_endpoints,
        )  # fmt: skip
        result.violations.extend(f"matrix: {v}" for v in played.violations)
        for key in ("payments sent", "payments by final status", "operations by final status"):
            result.figures[f"matrix: {key}"] = played.figures.get(key)
        endpoints = [registered["steady"], registered["flaky"]]
        merchant_id = registered["merchant_id"]
        started = time.monotonic()
        while True:
            ((pending,),) = stack.sql(
                "SELECT count(*) FROM webhooks_delivery WHERE endpoint_id = ANY(%s) "
                "AND status = 'pending'",
                [endpoints],
            )
            if pending == 0 or time.monotonic() - started > drain_timeout:
                break
            time.sleep(1)
        result.figures["drain after the matrix, s"] = round(time.monotonic() - started, 1)
        result.check(pending == 0, f"{pending} deliveries still pending after {drain_timeout} s")
        _check(stack, result, merchant_id, endpoints, receivers)
    finally:
        steady.stop()
        flaky.stop()
    return result


def _check(
    stack: Stack,
    result: CampaignResult,
    merchant_id: int,
    endpoints: list[str],
    receivers: dict[str, VerifyingReceiver],
) -> None:
    events = stack.sql(
        "SELECT id, type, object_id FROM webhooks_event WHERE merchant_id = %s", [merchant_id]
    )
    expected = {event_id for event_id, _, _ in events}
    result.figures["events by type"] = dict(sorted(Counter(t for _, t, _ in events).items()))
    # Exactly once in the outbox: a payment's events are its changes into an event status.
    changes = Counter(
        dict(
            stack.sql(
                "SELECT e.payment_id, count(*) FROM payments_paymentevent e "
                "JOIN payments_payment p ON p.id = e.payment_id WHERE p.merchant_id = %s "
                "AND e.to_status IS DISTINCT FROM e.from_status AND e.to_status = ANY(%s) "
                "GROUP BY e.payment_id",
                [merchant_id, list(EVENT_STATUSES)],
            )
        )
    )
    written = Counter(o for _, t, o in events if t.startswith("payment."))
    mismatched = sorted(p for p in set(changes) | set(written) if changes[p] != written[p])
    result.figures["payments whose events are not exactly their changes"] = len(mismatched)
    result.violations.extend(
        f"{p}: {changes[p]} changes, {written[p]} events" for p in mismatched[:20]
    )
    refunds_without_event = stack.sql(
        "SELECT o.id FROM payments_paymentoperation o JOIN payments_payment p "
        "ON p.id = o.payment_id WHERE p.merchant_id = %s AND o.kind = 'refund' "
        "AND o.status <> 'pending' AND NOT EXISTS (SELECT 1 FROM webhooks_event e "
        "WHERE e.object_id = o.id AND e.type = 'refund.' || o.status)",
        [merchant_id],
    )
    result.check(
        not refunds_without_event, f"{len(refunds_without_event)} final refunds without event"
    )
    # At least once at each receiver, verified.
    for name, receiver in receivers.items():
        got = Counter(v.webhook_id for v in receiver.verified)
        missing = expected - set(got)
        unknown = set(got) - expected
        result.figures[f"{name}: verified deliveries"] = sum(got.values())
        result.figures[f"{name}: duplicates (same webhook-id again)"] = sum(got.values()) - len(got)
        result.figures[f"{name}: 500 answered / bad signatures"] = (
            f"{receiver.failed} / {receiver.rejected}"
        )
        result.figures[f"{name}: missing"] = len(missing)
        result.check(not missing, f"{name}: {len(missing)} events never received")
        result.check(not unknown, f"{name}: {len(unknown)} unknown webhook-ids received")
        result.check(receiver.rejected == 0, f"{name}: {receiver.rejected} bad signatures")
    outcomes = stack.sql(
        "SELECT endpoint_id, outcome, count(*) FROM webhooks_deliveryattempt "
        "WHERE endpoint_id = ANY(%s) GROUP BY endpoint_id, outcome ORDER BY 1, 2",
        [endpoints],
    )
    names = dict(zip(endpoints, receivers, strict=True))
    result.figures["attempts by endpoint and outcome"] = {
        f"{names[e]}/{o}": n for e, o, n in outcomes
    }
    ((failed,),) = stack.sql(
        "SELECT count(*) FROM webhooks_delivery WHERE endpoint_id = ANY(%s) AND status = 'failed'",
        [endpoints],
    )
    result.check(failed == 0, f"{failed} deliveries gave up")

"""The fault matrix with the sandbox's notifications on, dropped, duplicated, delayed and so
reordered (docs/connectors.md, "Notifications"; ADR 0046).

1. The stack's sandbox (``alpha``) sends its signed notifications to the web's
   ``/acquirer_notifications/alpha`` with faults: ``drop_rate`` never sent, ``duplicate_rate``
   sent twice with the same id, each copy delayed up to ``max_delay_seconds`` (so they arrive
   out of order), retried with backoff when the answer is not a 2xx.
2. The fault matrix runs for a merchant of its own (``campaigns.matrix``: every condition and
   token, captures and refunds, merchant retries), with its own checks: every payment and
   operation final and consistent with the sandbox's records (the final states polling alone
   finds), the ledger audit clean.
3. After the sender and the apply tasks drained: every stored notification applied or ignored
   (none left ``received``), one row per notification id (the duplicates deduplicated), no
   notification applied twice (one ``acquirer_notification`` event per row at most), none
   refused (every signature verified), and the figures: emitted, dropped, duplicated, stored.
"""

from __future__ import annotations

import time

import httpx

from campaigns import matrix
from campaigns.harness import NOTIFICATION_SECRET, CampaignResult, Stack


def run(
    stack: Stack,
    *,
    payments: int = 1000,
    concurrency: int = 16,
    recovery_timeout: float = 60.0,
    pace: float | None = None,
    drop_rate: float = 0.2,
    duplicate_rate: float = 0.3,
    max_delay_seconds: float = 3.0,
    drain_timeout: float = 180.0,
) -> CampaignResult:
    result = CampaignResult("notifications")
    assert stack.web is not None and stack.sandbox is not None
    control = f"{stack.sandbox.url}/_sandbox/notifications"
    target = {
        "url": f"{stack.web.url}/acquirer_notifications/alpha",
        "secrets": [NOTIFICATION_SECRET],
        "drop_rate": drop_rate,
        "duplicate_rate": duplicate_rate,
        "max_delay_seconds": max_delay_seconds,
        "backoff_base": 0.2,
        "backoff_cap": 2.0,
    }
    httpx.put(control, json=target, timeout=10).raise_for_status()
    try:
        played = matrix.run(
            stack, payments=payments, concurrency=concurrency,
            recovery_timeout=recovery_timeout, pace=pace, merchant="notifications",
        )  # fmt: skip
        result.violations.extend(f"matrix: {v}" for v in played.violations)
        for key, value in played.figures.items():
            result.figures[f"matrix: {key}"] = value
        started = time.monotonic()
        while True:
            sender = httpx.get(control, timeout=10).json()
            ((waiting,),) = stack.sql(
                "SELECT count(*) FROM payments_acquirernotification WHERE status = 'received'"
            )
            if (sender["pending"] == 0 and waiting == 0) or (
                time.monotonic() - started > drain_timeout
            ):
                break
            time.sleep(1)
        result.figures["drain after the matrix, s"] = round(time.monotonic() - started, 1)
        _check(stack, result, sender, waiting)
    finally:
        httpx.delete(control, timeout=10)
    return result


def _check(stack: Stack, result: CampaignResult, sender: dict, waiting: int) -> None:
    for key in ("emitted", "dropped", "duplicated", "delivered", "given_up", "failed_attempts"):
        result.figures[f"sandbox notifications {key}"] = sender[key]
    rows = stack.sql(
        "SELECT status, count(*) FROM payments_acquirernotification WHERE acquirer = 'alpha' "
        "GROUP BY status"
    )
    by_status = dict(rows)
    stored = sum(by_status.values())
    result.figures["notifications stored, by status"] = dict(sorted(by_status.items()))
    expected = sender["emitted"] - sender["dropped"] - sender["given_up"]
    # The work done: a run in which the sandbox sent nothing, or nothing arrived, proves nothing.
    result.check(
        sender["emitted"] > 0 and sender["duplicated"] > 0 and by_status.get("applied", 0) > 0,
        f"no notification work to judge: {sender['emitted']} emitted, "
        f"{sender['duplicated']} duplicated, {by_status.get('applied', 0)} applied",
    )
    result.check(
        stored == expected,
        f"{stored} notifications stored, {expected} sent (emitted - dropped - given up)",
    )
    result.check(waiting == 0, f"{waiting} notifications still not applied after the drain")
    twice = stack.sql(
        "SELECT data->>'event_id', count(*) FROM payments_paymentevent "
        "WHERE type = 'acquirer_notification' GROUP BY 1 HAVING count(*) > 1"
    )
    result.figures["notifications applied twice"] = len(twice)
    result.violations.extend(f"{event_id} applied {n} times" for event_id, n in twice[:20])
    # The refusal counter lives in each web process: their shared log line says it.
    refusals = stack.log("web").read_text(errors="replace").count("notification refused")
    result.figures["notifications refused (bad signatures)"] = refusals
    result.check(refusals == 0, f"{refusals} notifications refused")

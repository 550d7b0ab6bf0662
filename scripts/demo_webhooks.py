"""``make demo``'s webhook step: a ``202`` payment's final event arriving after reconciliation.

A local receiver (:class:`webhooks.receiver.VerifyingReceiver`, which checks each signature
with the ``standardwebhooks`` package) is registered as a webhook endpoint through the API;
the sandbox then answers every ``POST /charges`` ``500`` after recording the charge, for a few
seconds, so the payment is answered ``202 processing``; reconciliation finds the charge, and
the ``payment.succeeded`` event reaches the receiver, signed, without any polling by the
merchant. The endpoint is deleted afterwards. Kept apart from ``scripts/demo.py``'s merchant
code: ``demo.py`` calls :func:`webhook_after_reconciliation` as one more step.
"""

from __future__ import annotations

import time
import uuid

import httpx

from webhooks.receiver import VerifyingReceiver, register, unregister

__all__ = ["webhook_after_reconciliation"]


def webhook_after_reconciliation(
    api: str, sandbox: str, api_key: str, *, wait_seconds: float = 90.0
) -> tuple[str, bool, str]:
    """Run the step, printing what happens; returns (title, as documented, expectation)."""
    title = "webhook after a 202"
    expected = (
        "202 processing; no event while processing; reconciliation resolves it and one "
        "payment.succeeded event arrives, its signature verified by standardwebhooks"
    )
    receiver = VerifyingReceiver().start()
    headers = {"Authorization": f"Bearer {api_key}"}
    endpoint_id = None
    try:
        endpoint_id, secret = register(api, api_key, receiver.url)
        receiver.secrets.append(secret)
        print(f"setup     webhook endpoint {endpoint_id} -> {receiver.url} (every event type)")
        outage = {"duration_seconds": 5, "failure": 500, "phase": "after_commit"}
        httpx.post(
            f"{sandbox}/_sandbox/conditions/outage",
            json={**outage, "endpoints": ["POST /charges"]},
            timeout=10,
        ).raise_for_status()
        print("setup     the sandbox answers every POST /charges 500 after recording it, for 5 s")
        try:
            answer = httpx.post(
                f"{api}/payments",
                json={"amount": 2500, "currency": "EUR", "payment_method": "tok_visa",
                      "reference": f"webhook-demo-{uuid.uuid4().hex[:8]}"},
                headers=headers | {"Idempotency-Key": uuid.uuid4().hex},
                timeout=60,
            )  # fmt: skip
        finally:
            httpx.delete(f"{sandbox}/_sandbox/conditions/outage", timeout=10)
        payment = answer.json()
        print(
            f"answer    {answer.status_code}  payment {payment.get('id')} {payment.get('status')}"
        )
        before = [v for v in receiver.verified if v.object_id == payment.get("id")]
        started = time.monotonic()
        print("then      the merchant waits for its webhook (no polling)")
        arrived = []
        while not arrived and time.monotonic() - started < wait_seconds:
            time.sleep(0.5)
            arrived = [v for v in receiver.verified if v.object_id == payment.get("id")]
        waited = time.monotonic() - started
        for event in arrived:
            print(
                f"webhook   {event.type} {event.object_id} {event.status} "
                f"(webhook-id {event.webhook_id}) after {waited:.0f} s, signature verified"
            )
        ok = (
            answer.status_code == 202
            and payment.get("status") == "processing"
            and not before
            and [(v.type, v.status) for v in arrived] == [("payment.succeeded", "succeeded")]
            and receiver.rejected == 0
        )
    finally:
        receiver.stop()
        if endpoint_id is not None and not unregister(api, api_key, endpoint_id):
            print(
                f"warning   webhook endpoint {endpoint_id} could not be deleted: delete it "
                "(DELETE /webhook_endpoints/{id}) or its events are retried for 3 days"
            )
    return title, ok, expected

"""``make demo``'s Stripe step: a payment taken through ``make run``'s third acquirer, ``stripe``
(a ``type: stripe`` connector in front of localstripe, a Stripe-compatible fake on
127.0.0.1:8092).

``make run`` routes JPY to it (``currencies: ["JPY"]``, first by priority), so the step sends a
manual JPY payment (JPY is zero-decimal: 500 is ¥500) with Stripe's test PaymentMethod
``pm_card_visa``, captures ¥300 of it (the rest released) and refunds ¥100, then reads
localstripe's own listings over HTTP: exactly one PaymentIntent filed under the payment's id,
succeeded, and one refund of ours. Kept apart from ``scripts/demo.py``'s sandbox scenarios:
``demo.py`` calls :func:`stripe_payment` as one more step.
"""

from __future__ import annotations

import uuid

import httpx

__all__ = ["stripe_payment"]

#: The secret key make run hands its stripe acquirer (localstripe accepts any ``sk_`` key).
LOCALSTRIPE_KEY = "sk_test_localstripe_make_run"


def stripe_payment(api: str, api_key: str, localstripe: str) -> tuple[str, bool, str]:
    """Run the step, printing what happens; returns (title, as documented, expectation)."""
    title = "a payment through the stripe connector"
    expected = (
        "201 requires_capture at acquirer stripe; capture ¥300 200 succeeded; refund ¥100 201; "
        "one PaymentIntent at localstripe, succeeded; one refund of ours"
    )
    print(f"localstripe {localstripe}")
    try:
        httpx.get(f"{localstripe}/v1/balance", auth=(LOCALSTRIPE_KEY, ""), timeout=3.0)
    except httpx.HTTPError:
        print("skipped   localstripe is not reachable (make run starts it on :8092)")
        return title, False, expected
    headers = {"Authorization": f"Bearer {api_key}"}
    run = uuid.uuid4().hex[:6]
    with httpx.Client(base_url=api, headers=headers, timeout=30.0, trust_env=False) as service:
        body = {
            "amount": 500,
            "currency": "JPY",
            "payment_method": "pm_card_visa",
            "reference": f"demo-stripe-{run}",
            "capture_method": "manual",
        }
        created = service.post("/payments", json=body, headers={"Idempotency-Key": f"s-{run}"})
        payment = created.json()
        print(f"POST /payments {body} -> {created.status_code} {payment.get('status')}")
        payment_id = payment.get("id", "")
        captured = service.post(
            f"/payments/{payment_id}/capture", json={"amount": 300},
            headers={"Idempotency-Key": f"s-{run}-cap"},
        )  # fmt: skip
        print(f"capture ¥300 -> {captured.status_code} {captured.json().get('status')}")
        refunded = service.post(
            f"/payments/{payment_id}/refunds", json={"amount": 100},
            headers={"Idempotency-Key": f"s-{run}-ref"},
        )  # fmt: skip
        print(f"refund ¥100 -> {refunded.status_code} {refunded.json().get('status')}")
    with httpx.Client(base_url=localstripe, auth=(LOCALSTRIPE_KEY, ""), timeout=10.0) as oracle:
        # One page: the demo's own localstripe holds few objects (make run starts it empty).
        intents = oracle.get("/v1/payment_intents", params={"limit": "100"}).json()["data"]
        ours = [pi for pi in intents if pi["metadata"].get("payment_reference") == payment_id]
        refunds = []
        if len(ours) == 1:
            listed = oracle.get("/v1/refunds", params={"payment_intent": ours[0]["id"]})
            refunds = [r for r in listed.json()["data"] if r["metadata"].get("refund_reference")]
    print(
        f"localstripe {len(ours)} PaymentIntent(s) for {payment_id}: "
        f"{[(pi['id'], pi['status'], pi['amount']) for pi in ours]}; "
        f"our refunds {[r['amount'] for r in refunds]}"
    )
    ok = (
        (created.status_code, payment.get("status"), payment.get("acquirer"))
        == (201, "requires_capture", "stripe")
        and captured.status_code == 200
        and refunded.status_code == 201
        and [(pi["status"], pi["amount"]) for pi in ours] == [("succeeded", 500)]
        and [r["amount"] for r in refunds] == [100]
    )
    return title, ok, expected

"""The notification connectors of gateway_client (gateway_client/stripe_notifications.py,
sandbox_notifications.py): verified on the raw bytes, each checked against an independent
implementation (the ``stripe`` package's ``Webhook.construct_event``; the ``standardwebhooks``
package's ``Webhook.verify``), and their parsers. No database, no subprocess."""

from __future__ import annotations

import json
import time

import pytest
import standardwebhooks
import stripe

from gateway_client import (
    ADYEN_DISPUTE_EVENTS,
    ADYEN_DISPUTE_STATUSES,
    STRIPE_DISPUTE_STATUSES,
    NotificationRejected,
    SandboxNotifications,
    StripeNotifications,
    stripe_signature_header,
)
from gateway_client.disputes import DISPUTE_STATUSES
from tests.support.notifications import (
    SANDBOX_SECRET,
    STRIPE_SECRET,
    sandbox_notification,
    stripe_dispute_event,
    stripe_event,
    stripe_signed,
)

NOW = 1_800_000_000
OLD_SECRET = "whsec_test_" + "o" * 32
INTENT = {"id": "pi_123", "object": "payment_intent", "metadata": {"payment_reference": "pay_1"}}


def stripe_connector(*secrets: str, now: float = NOW) -> StripeNotifications:
    return StripeNotifications(secrets or (STRIPE_SECRET,), clock=lambda: now)


def construct(body: bytes, header: str, secret: str = STRIPE_SECRET) -> object:
    return stripe.Webhook.construct_event(body.decode(), header, secret, tolerance=300)


def test_our_signing_helper_is_stripes_scheme():
    """What the tests sign, Stripe's own library accepts (and so does our connector)."""
    body = stripe_event("payment_intent.succeeded", INTENT)
    header = stripe_signed(body, [STRIPE_SECRET])
    assert construct(body, header)["type"] == "payment_intent.succeeded"
    assert header == stripe_signature_header([STRIPE_SECRET], int(header[2:].split(",")[0]), body)


def test_what_we_accept_stripe_accepts_and_what_we_refuse_it_refuses():
    """A corpus: the signed event, each of its bytes changed, the same JSON re-indented, the
    header with its v1 changed, another secret: our verdict is construct_event's."""
    body = stripe_event("payment_intent.succeeded", INTENT)
    now = int(time.time())
    header = stripe_signed(body, [STRIPE_SECRET], now)
    reindented = json.dumps(json.loads(body), indent=2).encode()
    cases = [(body, header), (reindented, header), (body, stripe_signed(body, [OLD_SECRET], now))]
    cases += [
        (body[:i] + bytes([body[i] ^ 1]) + body[i + 1 :], header) for i in range(0, len(body), 4)
    ]
    cases += [(body, header[:-1] + ("0" if header[-1] != "0" else "1"))]
    verdicts = []
    for raw, signature in cases:
        try:
            stripe_connector(now=now).verify(raw, {"stripe-signature": signature})
            ours = True
        except NotificationRejected:
            ours = False
        try:
            construct(raw, signature)
            theirs = True
        except (stripe.SignatureVerificationError, ValueError):
            theirs = False
        verdicts.append((ours, theirs))
    assert verdicts[0] == (True, True)
    assert verdicts[1] == (False, False)  # the same JSON re-indented
    assert all(ours == theirs for ours, theirs in verdicts), verdicts
    assert sum(ours for ours, _ in verdicts) == 1
    assert len(cases) > 60


def test_a_rotation_signs_twice_and_either_secret_verifies():
    body = stripe_event("charge.refunded", {"id": "ch_1", "payment_intent": "pi_1"})
    header = stripe_signed(body, [STRIPE_SECRET, OLD_SECRET], NOW)
    assert header.count("v1=") == 2
    stripe_connector(STRIPE_SECRET).verify(body, {"stripe-signature": header})
    stripe_connector(OLD_SECRET).verify(body, {"stripe-signature": header})
    stripe_connector(STRIPE_SECRET, OLD_SECRET).verify(
        body, {"stripe-signature": stripe_signed(body, [OLD_SECRET], NOW)}
    )


@pytest.mark.parametrize(
    ("offset", "accepted"), [(-301, False), (-300, True), (0, True), (300, True), (301, False)]
)
def test_the_timestamp_tolerance_is_read_on_the_injected_clock(offset, accepted):
    body = stripe_event("payment_intent.succeeded", INTENT)
    header = stripe_signed(body, [STRIPE_SECRET], NOW)
    connector = stripe_connector(now=NOW - offset)
    if accepted:
        connector.verify(body, {"stripe-signature": header})
    else:
        with pytest.raises(NotificationRejected) as caught:
            connector.verify(body, {"stripe-signature": header})
        assert caught.value.reason == "stale_timestamp"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing_signature"),
        ("", "missing_signature"),
        ("t=abc,v1=00", "bad_signature"),
        ("v1=00", "bad_signature"),
        (f"t={NOW}", "bad_signature"),
        (f"t={NOW},v0=00", "bad_signature"),
        (f"t={NOW},v1=é", "bad_signature"),
        ("t=1," + "v1=0," * 2000, "bad_signature"),
    ],
)
def test_a_malformed_stripe_signature_is_refused_with_its_reason(header, reason):
    headers = {} if header is None else {"stripe-signature": header}
    with pytest.raises(NotificationRejected) as caught:
        stripe_connector().verify(b"{}", headers)
    assert caught.value.reason == reason
    assert STRIPE_SECRET not in str(caught.value)


def test_stripe_events_parse_into_our_references_and_disputes_into_minor_units():
    connector = stripe_connector()
    [intent] = connector.parse(stripe_event("payment_intent.succeeded", INTENT, created=NOW))
    assert (intent.subject, intent.payment_reference, intent.acquirer_reference) == (
        "payment",
        "pay_1",
        "pi_123",
    )
    assert intent.occurred_at is not None and intent.occurred_at.timestamp() == NOW
    [dispute] = connector.parse(
        stripe_dispute_event(
            "charge.dispute.created",
            dispute_id="dp_1",
            payment_intent="pi_9",
            amount=150000,
            currency="isk",
            status="needs_response",
        )
    )
    assert dispute.subject == "dispute" and dispute.acquirer_reference == "pi_9"
    assert dispute.dispute is not None
    assert (dispute.dispute.amount, dispute.dispute.currency) == (1500, "ISK")  # Stripe's x100
    assert dispute.dispute.status == "needs_response" and dispute.dispute.evidence_due_by
    [other] = connector.parse(stripe_event("customer.created", {"id": "cus_1"}))
    assert other.subject == "other"
    for bad in (b"[]", b"{", b'{"id":"evt_1"}', stripe_dispute_event(
        "charge.dispute.closed", dispute_id="dp_1", payment_intent="pi_9", amount=1,
        currency="eur", status="invented")):  # fmt: skip
        with pytest.raises(NotificationRejected) as caught:
            connector.parse(bad)
        assert caught.value.reason == "malformed"


def test_every_providers_dispute_status_maps_to_one_of_ours():
    mapped = [*STRIPE_DISPUTE_STATUSES.values(), *ADYEN_DISPUTE_EVENTS.values()]
    mapped += ADYEN_DISPUTE_STATUSES.values()
    assert set(mapped) == set(DISPUTE_STATUSES)


def test_the_sandboxs_signature_is_standard_webhooks():
    """The sandbox's own signing code, our verifier and the standardwebhooks package agree."""
    obj = {"id": "ch_1", "reference": "pay_1", "status": "approved"}
    body, headers = sandbox_notification("charge.authorized", obj)
    standardwebhooks.Webhook(SANDBOX_SECRET).verify(body, headers)
    connector = SandboxNotifications([SANDBOX_SECRET], clock=time.time)
    connector.verify(body, headers)
    [item] = connector.parse(body)
    assert (item.subject, item.payment_reference, item.acquirer_reference) == (
        "payment",
        "pay_1",
        "ch_1",
    )
    reindented = json.dumps(json.loads(body), indent=1).encode()
    for raw, given in [
        (reindented, headers),
        (body, {**headers, "webhook-id": "ntf_other"}),
        (body, {**headers, "webhook-timestamp": str(int(time.time()) + 1)}),
    ]:
        with pytest.raises(NotificationRejected):
            connector.verify(raw, given)
        with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
            standardwebhooks.Webhook(SANDBOX_SECRET).verify(raw, given)
    stale = SandboxNotifications([SANDBOX_SECRET], clock=lambda: time.time() + 301)
    with pytest.raises(NotificationRejected, match="tolerance"):
        stale.verify(body, headers)

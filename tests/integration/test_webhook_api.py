"""The webhooks API (issue 13): endpoints and events, scoped per merchant, idempotent POSTs,
400 validation_error for invalid URLs and unknown event types, problems everywhere."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from tests.support.webhook_events import event_written
from webhooks.models import Delivery, WebhookEndpoint
from webhooks.outbox import event_record

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hooks"
BODY = {"url": URL, "enabled_events": ["payment.succeeded", "refund.failed"], "description": "shop"}


def create(merchant, body=None, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return merchant.client.post("/webhook_endpoints", body or BODY, format="json", **headers)


def test_create_answers_the_endpoint_with_its_secret_once(merchant_a):
    response = create(merchant_a)
    assert response.status_code == 201, response.content
    body = response.json()
    assert re.fullmatch(r"we_[0-9a-f]{24}", body["id"])
    assert response["Location"] == f"/webhook_endpoints/{body['id']}"
    assert body["secret"].startswith("whsec_")
    assert {k: body[k] for k in ("object", "url", "enabled_events", "status", "description")} == {
        "object": "webhook_endpoint", "url": URL, "status": "enabled", "description": "shop",
        "enabled_events": ["payment.succeeded", "refund.failed"],
    }  # fmt: skip
    shown = merchant_a.client.get(f"/webhook_endpoints/{body['id']}").json()
    assert "secret" not in shown and shown["id"] == body["id"]
    listed = merchant_a.client.get("/webhook_endpoints").json()
    assert [e["id"] for e in listed["data"]] == [body["id"]] and "secret" not in listed["data"][0]


def test_another_merchants_endpoint_and_event_are_404(merchant_a, merchant_b):
    endpoint_id = create(merchant_a).json()["id"]
    with transaction.atomic():
        event = event_record(
            merchant_id=merchant_a.merchant.pk, event_type="payment.succeeded", object_id="pay_x",
            obj={"id": "pay_x"}, now=timezone.now(),
        )  # fmt: skip
    client = merchant_b.client
    for response in (
        client.get(f"/webhook_endpoints/{endpoint_id}"),
        client.delete(f"/webhook_endpoints/{endpoint_id}"),
        client.post(f"/webhook_endpoints/{endpoint_id}/rotate_secret"),
        client.get(f"/events/{event.id}"),
    ):
        assert response.status_code == 404
        assert response["Content-Type"] == "application/problem+json"
    assert client.get("/webhook_endpoints").json()["data"] == []
    assert client.get("/events").json()["data"] == []


def test_the_idempotency_key_replays_the_first_answer_and_refuses_another_body(merchant_a):
    first = create(merchant_a, key="we-1")
    again = create(merchant_a, key="we-1")
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert WebhookEndpoint.objects.count() == 1
    other = create(merchant_a, {**BODY, "description": "other"}, key="we-1")
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
    endpoint_id = first.json()["id"]
    path = f"/webhook_endpoints/{endpoint_id}/rotate_secret"
    rotated = merchant_a.client.post(path, HTTP_IDEMPOTENCY_KEY="rot-1")
    replayed = merchant_a.client.post(path, HTTP_IDEMPOTENCY_KEY="rot-1")
    assert rotated.status_code == 200 and replayed.content == rotated.content
    assert rotated.json()["secret"] not in (first.json()["secret"],)
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.secret, endpoint.previous_secret) == (
        rotated.json()["secret"], first.json()["secret"],
    )  # fmt: skip


def test_rotate_secret_reads_its_body_and_refuses_what_it_does_not_take(merchant_a):
    """Empty and ``{}`` rotate; a member (an overlap asked for, say), invalid JSON or another
    content type is a 400 and the secret stays: a body is never silently ignored."""
    endpoint_id = create(merchant_a).json()["id"]
    path = f"/webhook_endpoints/{endpoint_id}/rotate_secret"
    secret = WebhookEndpoint.objects.get().secret
    for body, content_type, code in [
        (b'{"expires_in": 0}', "application/json", "validation_error"),
        (b'{"expire_current_in_seconds": 0}', "application/json", "validation_error"),
        (b"[]", "application/json", "validation_error"),
        (b"{", "application/json", "invalid_json"),
        (b"expires_in=0", "application/x-www-form-urlencoded", "unsupported_media_type"),
    ]:
        refused = merchant_a.client.post(path, data=body, content_type=content_type)
        assert (refused.status_code, refused.json()["code"]) == (400, code), body
        assert WebhookEndpoint.objects.get().secret == secret
    for body in (b"", b"{}"):
        rotated = merchant_a.client.post(path, data=body, content_type="application/json")
        assert rotated.status_code == 200
        assert WebhookEndpoint.objects.get().secret == rotated.json()["secret"] != secret
        secret = rotated.json()["secret"]


BAD_URLS = [
    None, 7, "", "not a url", "ftp://127.0.0.1/x", "https://", "//127.0.0.1/x",
    "https://user:pw@127.0.0.1/x", "http://127.0.0.1/x#frag", "http://127.0.0.1/é",
    "http://127.0.0.1:99999/x", "http://127.0.0.1/" + "a" * 2100, "http://10.0.0.1/x",
    "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/x", "http://0.0.0.0/x",
]  # fmt: skip
BAD_EVENTS = [
    None, "payment.succeeded", [], ["nope"], ["payment.succeeded", "nope"], ["*", "refund.failed"],
    [1], [None], {"payment.succeeded": True}, ["PAYMENT.SUCCEEDED"],
]  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("url", url) for url in BAD_URLS] + [("enabled_events", events) for events in BAD_EVENTS],
)
def test_invalid_urls_and_unknown_event_types_are_400_validation_error(merchant_a, field, value):
    response = create(merchant_a, {**BODY, field: value})
    assert response.status_code == 400, response.content
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert [e["field"] for e in problem["errors"]] == [field]
    if isinstance(value, str) and len(value) > 3:
        assert value not in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


PRODUCTION_REFUSED = [
    "http://127.0.0.1/x", "https://127.0.0.1/x", "https://10.1.2.3/x", "https://192.168.0.10/x",
    "https://172.16.5.5/x", "https://169.254.169.254/x", "https://100.64.0.1/x", "https://[::1]/x",
    "https://[::ffff:127.0.0.1]/x", "https://[fd00:ec2::254]/x", "https://224.0.0.1/x",
    "https://localhost/x",
    # IPv6 that a translator turns into a private IPv4 (NAT64 prefixes, 6to4).
    "https://[64:ff9b::7f00:1]/x", "https://[64:ff9b::a9fe:a9fe]/x", "https://[64:ff9b:1::a00:1]/x",
    "https://[2002:7f00:1::]/x",
]  # fmt: skip


@pytest.mark.parametrize("url", PRODUCTION_REFUSED)
def test_production_settings_refuse_http_and_non_public_addresses(merchant_a, settings, url):
    settings.WEBHOOK_ALLOW_LOCAL_URLS = False
    response = create(merchant_a, {**BODY, "url": url})
    assert (response.status_code, response.json()["errors"][0]["field"]) == (400, "url")
    assert response.json()["errors"][0]["code"] in ("insecure_scheme", "forbidden_address")


def test_card_data_in_the_description_or_the_key_is_refused(merchant_a):
    response = create(merchant_a, {**BODY, "description": "card 4242 4242 4242 4242"})
    assert (response.status_code, response.json()["code"]) == (400, "card_data_not_accepted")
    assert b"4242" not in response.content
    keyed = create(merchant_a, key="4242424242424242")
    assert (keyed.status_code, keyed.json()["code"]) == (400, "card_data_not_accepted")
    assert not WebhookEndpoint.objects.exists()


def test_delete_stops_deliveries_and_the_endpoint_is_gone(merchant_a):
    endpoint_id = create(merchant_a).json()["id"]
    event_written(merchant_a.merchant.pk, "pay_d", obj={"id": "pay_d"})
    response = merchant_a.client.delete(f"/webhook_endpoints/{endpoint_id}")
    assert response.json() == {"id": endpoint_id, "object": "webhook_endpoint", "deleted": True}
    assert merchant_a.client.get(f"/webhook_endpoints/{endpoint_id}").status_code == 404
    assert merchant_a.client.delete(f"/webhook_endpoints/{endpoint_id}").status_code == 404
    assert Delivery.objects.get().status == "canceled"


def test_events_list_newest_first_with_type_filter_and_cursor(merchant_a):
    now = timezone.now()
    with transaction.atomic():
        events = [
            event_record(
                merchant_id=merchant_a.merchant.pk,
                event_type=event_type,
                object_id=f"pay_{n}",
                obj={"id": f"pay_{n}", "object": "payment"},
                now=now + timedelta(seconds=n),
            )
            for n, event_type in enumerate(["payment.succeeded", "refund.failed"] * 3)
        ]
    client = merchant_a.client
    page = client.get("/events", {"limit": 4}).json()
    assert (page["object"], page["has_more"]) == ("list", True)
    assert [e["id"] for e in page["data"]] == [e.id for e in reversed(events)][:4]
    rest = client.get("/events", {"limit": 4, "starting_after": page["data"][-1]["id"]}).json()
    assert [e["id"] for e in rest["data"]] == [events[1].id, events[0].id]
    assert not rest["has_more"]
    refunds = client.get("/events", {"type": "refund.failed"}).json()["data"]
    assert {e["type"] for e in refunds} == {"refund.failed"} and len(refunds) == 3
    one = client.get(f"/events/{events[0].id}").json()
    assert one == {
        "id": events[0].id, "object": "event", "type": "payment.succeeded",
        "created_at": one["created_at"], "data": {"object": {"id": "pay_0", "object": "payment"}},
    }  # fmt: skip
    assert one["created_at"].endswith("Z")
    for query in ({"type": "nope"}, {"starting_after": "evt_missing"}, {"colour": "red"}):
        bad = client.get("/events", query)
        assert (bad.status_code, bad.json()["code"]) == (400, "validation_error")


def test_openapi_lists_the_webhook_routes(client):
    paths = json.loads(client.get("/openapi.json").content)["paths"]
    assert {
        "/webhook_endpoints", "/webhook_endpoints/{endpoint_id}",
        "/webhook_endpoints/{endpoint_id}/rotate_secret", "/events", "/events/{event_id}",
    } <= set(paths)  # fmt: skip

"""The webhooks console (issue 13): read-only lists, no secret anywhere, the two audited
actions for operators only, and the backlog on /metrics."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils import timezone

from idempotency.models import IdempotencyKey
from tests.support.webhook_events import event_written
from webhooks.models import Delivery, Event, OperatorAction, WebhookEndpoint
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db

ROLES = importlib.import_module("webhooks.migrations.0002_console_roles")


@pytest.fixture
def setup(merchant_a):
    answer = endpoint_create(
        merchant=merchant_a.merchant, url="http://127.0.0.1:9/h", enabled_events=["*"],
        idempotency_key="adm-1",
    )  # fmt: skip
    secret = json.loads(answer.body)["secret"]
    endpoint = WebhookEndpoint.objects.get()
    # The event five minutes old: the endpoint existed then (an endpoint created after an event
    # never receives it, ADR 0042).
    WebhookEndpoint.objects.update(created_at=timezone.now() - timedelta(minutes=10))
    event = event_written(
        merchant_a.merchant.pk, "pay_a", obj={"id": "pay_a"},
        now=timezone.now() - timedelta(minutes=5),
    )  # fmt: skip
    ROLES.grant(apps, None)
    return endpoint, event, secret


def staff(client, role: str):
    user = User.objects.create_user(f"{role}-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return user


def test_every_list_and_page_shows_without_the_secret(client, setup):
    """The webhooks pages, and the idempotency key whose stored answer holds the secret."""
    endpoint, event, secret = setup
    client.force_login(User.objects.create_superuser("root", password="x"))
    pages = [
        "/admin/webhooks/webhookendpoint/",
        reverse("admin:webhooks_webhookendpoint_change", args=[quote(endpoint.id)]),
        "/admin/webhooks/event/", reverse("admin:webhooks_event_change", args=[quote(event.id)]),
        "/admin/webhooks/delivery/", "/admin/webhooks/deliveryattempt/",
        "/admin/webhooks/operatoraction/", f"/admin/webhooks/event/?q={event.id}",
        f"/admin/idempotency/idempotencykey/{IdempotencyKey.objects.get().pk}/change/",
    ]  # fmt: skip
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        assert secret.encode() not in response.content
        assert secret.removeprefix("whsec_").encode() not in response.content


def action(client, model: str, name: str, pk: str, note: str):
    return client.post(
        f"/admin/webhooks/{model}/",
        {"action": name, "_selected_action": [pk], "note": note, "index": 0},
    )


def test_operators_redeliver_and_enable_with_a_note_audited(client, setup):
    endpoint, event, _ = setup
    operator = staff(client, "operator")
    Delivery.objects.update(status="delivered", next_attempt_at=None)
    action(client, "event", "redeliver_selected", event.id, "merchant lost it")
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.window_started_at > event.created_at) == ("pending", True)
    WebhookEndpoint.objects.update(status="disabled", disabled_reason="gone")
    action(client, "webhookendpoint", "enable_selected", endpoint.id, "")  # no note: refused
    assert WebhookEndpoint.objects.get().status == "disabled"
    action(client, "webhookendpoint", "enable_selected", endpoint.id, "they fixed it")
    assert WebhookEndpoint.objects.get().status == "enabled"
    audit = OperatorAction.objects.order_by("id").values_list("operator", "action", "note")
    assert list(audit) == [
        (operator.username, "redeliver_event", "merchant lost it"),
        (operator.username, "enable_endpoint", "they fixed it"),
    ]  # fmt: skip


def test_support_cannot_act(client, setup):
    endpoint, event, _ = setup
    staff(client, "support")
    WebhookEndpoint.objects.update(status="disabled", disabled_reason="gone")
    action(client, "event", "redeliver_selected", event.id, "n")
    action(client, "webhookendpoint", "enable_selected", endpoint.id, "n")
    assert not OperatorAction.objects.exists()
    assert WebhookEndpoint.objects.get().status == "disabled"


def test_metrics_show_the_backlog_and_its_oldest_age(client, setup):
    text = client.get("/metrics").content.decode()
    assert "webhooks_backlog 1.0" in text
    age = next(
        float(line.split()[-1]) for line in text.splitlines()
        if line.startswith("webhooks_backlog_oldest_age_seconds ")
    )  # fmt: skip
    assert age >= 300
    assert 'webhooks_endpoints{status="enabled"} 1.0' in text
    assert "webhooks_events_not_fanned_out 0.0" in text  # the fixture's event was fanned out
    assert Event.objects.count() == 1

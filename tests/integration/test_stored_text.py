"""Every stored text a client, a merchant's server or an operator controls meets the card-data
rule (issue: stored text that never met the detector).

- :data:`STORED_TEXT` names every text column of every model with how the rule is kept for it;
  a new text column fails :func:`test_every_stored_text_column_is_accounted_for` until it is
  added there with its rule (``refused``, ``redacted``, or ``ours``: written by the service
  from values it made or checked, never free text).
- What django-axes records of a login attempt, an operator's note on a webhook endpoint, and a
  merchant's answer body (tests/integration/test_webhook_delivery.py) are checked with the
  generated spellings of tests/support/card_spellings.py.
"""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.apps import apps
from django.db import models
from django.db.models import Sum
from django.test import override_settings

from card_data import contains_card_number
from tests.support.card_spellings import spellings_with_pans
from webhooks.models import OperatorAction
from webhooks.services import ActionRefused, endpoint_enable

#: Model field -> (rule, where it is kept). Rules: ``refused`` (a card number is refused before
#: anything is stored), ``redacted`` (replaced before it is stored), ``ours`` (the service
#: writes it from values it generated or validated against a closed set).
STORED_TEXT: dict[str, tuple[str, str]] = {
    "admin.LogEntry.object_id": ("ours", "the primary key of the changed row"),
    "admin.LogEntry.object_repr": ("ours", "str() of our rows: ids and checked names"),
    "admin.LogEntry.change_message": ("ours", "Django's list of changed field names"),
    "auth.Permission.name": ("ours", "migrations"),
    "auth.Permission.codename": ("ours", "migrations"),
    "auth.Group.name": ("refused", "console/forms.py: every console form"),
    "auth.User.password": ("ours", "a password hash"),
    "auth.User.username": ("refused", "console/forms.py: every console form"),
    "auth.User.first_name": ("refused", "console/forms.py: every console form"),
    "auth.User.last_name": ("refused", "console/forms.py: every console form"),
    "auth.User.email": ("refused", "console/forms.py: every console form"),
    "contenttypes.ContentType.app_label": ("ours", "migrations"),
    "contenttypes.ContentType.model": ("ours", "migrations"),
    "sessions.Session.session_key": ("ours", "random"),
    "sessions.Session.session_data": ("ours", "the signed session: user id, OTP device"),
    "otp_totp.TOTPDevice.name": ("ours", "console/two_factor.py names it"),
    "otp_totp.TOTPDevice.key": ("ours", "random"),
    **{
        f"axes.{model}.{field}": ("redacted", "console/middleware.py, login redaction")
        for model in ("AccessFailureLog", "AccessAttempt", "AccessLog")
        for field in ("user_agent", "username", "http_accept", "path_info")
    },
    "axes.AccessAttempt.get_data": ("redacted", "console/middleware.py, login redaction"),
    "axes.AccessAttempt.post_data": ("redacted", "console/middleware.py, login redaction"),
    "axes.AccessLog.session_hash": ("ours", "a hash"),
    "merchants.Merchant.name": ("refused", "merchants/services.py merchant_name_check"),
    "merchants.Merchant.acquirer_order": ("ours", "acquirer names from the settings"),
    "merchants.ApiKey.prefix": ("ours", "the key's generated prefix"),
    "merchants.ApiKey.key_hash": ("ours", "a hash"),
    "idempotency.IdempotencyKey.key": ("refused", "the Idempotency-Key header check"),
    "idempotency.IdempotencyKey.method": ("ours", "the request's method"),
    "idempotency.IdempotencyKey.route": ("ours", "the URL pattern, not the path"),
    "idempotency.IdempotencyKey.request_fingerprint": ("ours", "a hash"),
    "idempotency.IdempotencyKey.response_headers": ("ours", "our answer's headers"),
    "idempotency.IdempotencyKey.response_body": ("ours", "our answer, from checked input"),
    "payments.Payment.id": ("ours", "generated"),
    "payments.Payment.currency": ("ours", "ISO 4217, a closed set"),
    "payments.Payment.payment_method": ("ours", "tok_ + [A-Za-z0-9_], checked"),
    "payments.Payment.reference": ("refused", "the API's body check"),
    "payments.Payment.description": ("refused", "the API's body check"),
    "payments.Payment.decline_code": ("ours", "the acquirer's code, [a-z_] checked"),
    "payments.Payment.failure_code": ("ours", "our codes"),
    "payments.Payment.acquirer_reference": ("refused", "the operator's resolve form"),
    "payments.Payment.acquirer_idempotency_key": ("ours", "generated"),
    "payments.Payment.acquirer": ("ours", "acquirer names from the settings"),
    "payments.Payment.return_url": ("refused", "the API's body check (and the URL rules)"),
    "payments.Payment.return_token": ("ours", "random (payments.models.new_return_token)"),
    "payments.Payment.action_url": (
        "ours",
        "the acquirer's page address from its decoded answer (an http(s) URL it made), never "
        "a client's text",
    ),
    **{
        f"payments.{model}.{field}": rule
        for model in ("PaymentOperation", "Refund")
        for field, rule in (
            ("id", ("ours", "generated")),
            ("reason", ("refused", "the API's body check (a closed set)")),
            ("failure_code", ("ours", "our codes")),
            ("acquirer_reference", ("ours", "the acquirer's id, checked")),
            ("acquirer_idempotency_key", ("ours", "generated")),
        )
    },
    "payments.PaymentEvent.type": ("ours", "a closed set"),
    "payments.PaymentEvent.from_status": ("ours", "a closed set"),
    "payments.PaymentEvent.to_status": ("ours", "a closed set"),
    "payments.PaymentEvent.data": ("refused", "operator notes: the action forms' check"),
    "payments.PaymentEvent.request_id": ("refused", "X-Request-Id is adopted only without one"),
    "payments.Payment.trace_context": (
        "refused",
        "a continued traceparent is not stored when "
        "it reads as a card number (observability.trace_context.current_traceparent)",
    ),
    "webhooks.Event.trace_context": ("refused", "the same rule (current_traceparent)"),
    **{
        f"payments.AcquirerNotification.{field}": (
            "redacted",
            "payments/notifications/intake.py: the body redacted before it is parsed or stored",
        )
        for field in ("event_id", "event_type", "body")
    },
    "payments.AcquirerNotification.acquirer": ("ours", "acquirer names from the settings"),
    "payments.AcquirerNotification.subject": ("ours", "a closed set"),
    "payments.AcquirerNotification.payment_id": ("ours", "our payment id, found by a query"),
    "payments.AcquirerNotification.last_error": ("ours", "our messages"),
    "payments.Dispute.id": ("ours", "generated"),
    "payments.Dispute.acquirer": ("ours", "acquirer names from the settings"),
    **{
        f"payments.Dispute.{field}": (
            "redacted",
            "parsed from a notification body redacted at intake (payments/notifications/)",
        )
        for field in ("acquirer_dispute_reference", "currency", "reason", "provider_status")
    },
    "ledger.AuditRun.source": ("ours", "a closed set"),
    "ledger.AuditRun.triggered_by": ("ours", "the operator's user name, refused at creation"),
    "ledger.AuditRun.discrepancies": ("ours", "ids and amounts"),
    "ledger.AuditRun.unresolved": ("ours", "ids and amounts"),
    "ledger.AuditRun.csv_path": ("ours", "the settings' directory and a generated name"),
    "heartbeats.Heartbeat.name": ("ours", "process names"),
    "webhooks.WebhookEndpoint.id": ("ours", "generated"),
    "webhooks.WebhookEndpoint.url": ("refused", "the API's body check"),
    "webhooks.WebhookEndpoint.enabled_events": ("ours", "a closed set"),
    "webhooks.WebhookEndpoint.description": ("refused", "the API's body check"),
    "webhooks.WebhookEndpoint.secret": ("ours", "generated"),
    "webhooks.WebhookEndpoint.previous_secret": ("ours", "generated"),
    "webhooks.Event.id": ("ours", "generated"),
    "webhooks.Event.type": ("ours", "a closed set"),
    "webhooks.Event.object_id": ("ours", "generated"),
    "webhooks.Event.data": ("ours", "the payment or refund document, from checked input"),
    "webhooks.Delivery.lease_token": ("ours", "generated"),
    "webhooks.Delivery.last_error": ("ours", "an exception's class name"),
    "webhooks.DeliveryAttempt.outcome": ("ours", "a closed set"),
    "webhooks.DeliveryAttempt.error": ("ours", "an exception's class name"),
    "webhooks.DeliveryAttempt.response_body": ("redacted", "webhooks/delivery.py"),
    "webhooks.OperatorAction.operator": ("ours", "the operator's user name"),
    "webhooks.OperatorAction.action": ("ours", "a closed set"),
    "webhooks.OperatorAction.note": ("refused", "webhooks/services.py _note"),
}

TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField, models.BinaryField)


def stored_text_columns() -> set[str]:
    """``app_label.Model.field`` of every concrete text, JSON or binary column without a
    closed set of choices, in every installed model (ours and the libraries')."""
    return {
        f"{model._meta.label}.{field.name}"
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, TEXT_FIELDS) and not field.choices
    }


def test_every_stored_text_column_is_accounted_for():
    columns = stored_text_columns()
    assert sorted(columns - set(STORED_TEXT)) == [], "new text columns: say how each is kept"
    assert sorted(set(STORED_TEXT) - columns) == [], "columns that no longer exist"
    assert {rule for rule, _ in STORED_TEXT.values()} == {"refused", "redacted", "ours"}


def sample_spellings(step: int) -> list[tuple[str, str]]:
    return [pair for entries in spellings_with_pans().values() for pair in entries[::step]]


@pytest.mark.django_db
@override_settings(AXES_FAILURE_LIMIT=10_000)
def test_what_axes_records_of_a_login_holds_no_card_number(client):
    """The user name, the query string, other form fields, User-Agent and Accept of failed
    logins, each holding a spelled card number: axes's rows hold none of them."""
    pairs = sample_spellings(step=20)
    for _, text in pairs:
        client.post(
            "/admin/login/?next=/admin/&q=" + text,
            {"username": text, "password": "wrong", "otp_token": text, text: "1"},
            HTTP_USER_AGENT=text,
            HTTP_ACCEPT=text,
        )
    rows = [
        *AccessAttempt.objects.values_list(
            "username", "user_agent", "http_accept", "path_info", "get_data", "post_data"
        ),
        *AccessFailureLog.objects.values_list("username", "user_agent", "http_accept"),
    ]
    failures = AccessAttempt.objects.aggregate(n=Sum("failures_since_start"))["n"]
    assert failures == len(pairs) >= 30  # every attempt recorded
    stored = "\n".join(value for row in rows for value in row if value)
    assert "[card number redacted]" in stored
    assert [pan for pan, _ in pairs if pan in stored] == []
    assert not contains_card_number(stored)


@pytest.mark.django_db
def test_an_operators_note_with_a_card_number_is_refused():
    pairs = sample_spellings(step=50)
    for _, text in pairs:
        with pytest.raises(ActionRefused, match="card number"):
            endpoint_enable(endpoint_id="we_unknown", operator="ops", note=f"called {text}")
    assert OperatorAction.objects.count() == 0
    assert len(pairs) >= 14

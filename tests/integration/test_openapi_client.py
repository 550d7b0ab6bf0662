"""A Python client generated from the served OpenAPI document with openapi-python-client (as
docs/api.md tells merchants to), unedited, against the API over real HTTP (pytest-django's live
server, PostgreSQL, the sandbox): create a payment with an Idempotency-Key, capture it, refund
part of it, read the refund, list the events. The document tells the client what is required
(the key, the body's members), and a refusal comes back as the Problem model."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
import uuid
from types import ModuleType

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db(transaction=True)

PACKAGE = "payments_api_client"


@pytest.fixture(scope="session")
def generated(tmp_path_factory) -> ModuleType:
    """The client package, generated once per session from the document /openapi.json serves
    (without the formatter hooks: nothing edits what the generator wrote)."""
    where = tmp_path_factory.mktemp("client")
    document = where / "openapi.json"
    document.write_text(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))
    config = where / "config.yaml"
    config.write_text("post_hooks: []\n")
    command = [
        sys.executable, "-m", "openapi_python_client", "generate", "--path", str(document),
        "--output-path", str(where / PACKAGE), "--meta", "none", "--config", str(config),
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Warning" not in completed.stdout, completed.stdout
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))


def part(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_generated_client_pays_captures_refunds_and_lists_events(
    generated, live_server, merchant_a, sandbox
):
    models = part("models")
    payments = {name: part(f"api.payments.{name}") for name in
                ("payments_create", "payments_capture", "refunds_create")}  # fmt: skip
    client = generated.AuthenticatedClient(base_url=live_server.url, token=merchant_a.api_key)

    body = models.PaymentCreateInputRequest(
        amount=10_000,
        currency=models.CurrencyEnum.EUR,
        payment_method="tok_visa",
        capture_method=models.PaymentCreateInputCaptureMethodEnum.MANUAL,
        reference="order-33",
    )
    payment = payments["payments_create"].sync(
        client=client, body=body, idempotency_key=str(uuid.uuid4())
    )
    assert isinstance(payment, models.Payment), payment
    assert payment.status == models.PaymentStatusEnum.REQUIRES_CAPTURE

    captured = payments["payments_capture"].sync(
        payment.id, client=client, body=models.CaptureInputRequest(), idempotency_key="cap-1"
    )
    assert isinstance(captured, models.Payment), captured
    assert (captured.status, captured.amount_captured) == (
        models.PaymentStatusEnum.SUCCEEDED,
        10_000,
    )

    refund = payments["refunds_create"].sync(
        payment.id,
        client=client,
        body=models.RefundInputRequest(
            amount=2_500, reason=models.ReasonEnum.REQUESTED_BY_CUSTOMER
        ),
        idempotency_key="refund-1",
    )
    assert isinstance(refund, models.Refund), refund
    read = part("api.refunds.refunds_retrieve").sync(refund.id, client=client)
    assert isinstance(read, models.Refund)
    assert (read.id, read.payment, read.amount) == (refund.id, payment.id, 2_500)

    events = part("api.events.events_list").sync(client=client)
    assert isinstance(events, models.EventList)
    assert {"payment.requires_capture", "payment.succeeded"} <= {str(e.type_) for e in events.data}

    refused = payments["payments_create"].sync(
        client=client,
        body=models.PaymentCreateInputRequest(amount=1, currency=models.CurrencyEnum.EUR,
                                              payment_method="tok_visa",
                                              reference="4242 4242 4242 4242"),
        idempotency_key="with-card-data",
    )  # fmt: skip
    assert isinstance(refused, models.Problem)
    assert (refused.status, refused.code) == (400, "card_data_not_accepted")


def test_the_generated_client_requires_what_the_api_requires(generated):
    """The key is a required argument of every idempotent call, optional on the webhooks API's;
    a payment's amount, currency and payment method are required members."""
    for name in ("payments_create", "payments_capture", "payments_void", "refunds_create"):
        parameter = inspect.signature(part(f"api.payments.{name}").sync).parameters
        assert parameter["idempotency_key"].default is inspect.Parameter.empty, name
    rotate = part("api.webhook_endpoints.webhook_endpoints_rotate_secret").sync
    assert (
        inspect.signature(rotate).parameters["idempotency_key"].default
        is not inspect.Parameter.empty
    )
    required = {
        name
        for name, p in inspect.signature(
            part("models").PaymentCreateInputRequest
        ).parameters.items()
        if p.default is inspect.Parameter.empty
    }
    assert required == {"amount", "currency", "payment_method"}

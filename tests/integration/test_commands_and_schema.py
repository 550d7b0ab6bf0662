"""create_merchant, demo_setup, the OpenAPI schema and the docs page."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from merchants.models import ApiKey, Merchant
from merchants.services import api_key_hash

pytestmark = pytest.mark.django_db


def test_create_merchant_prints_the_key_last_and_stores_only_its_hash():
    """The last output line is the key; the database holds its SHA-256 and a short prefix."""
    out = StringIO()
    call_command("create_merchant", "Shop", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    stored = ApiKey.objects.get()
    assert key.startswith("sk_test_") and len(key) > 40  # the sandbox acquirer only: ADR 0039
    assert stored.key_hash == api_key_hash(key)
    assert key not in str(list(ApiKey.objects.values()))
    assert key.startswith(stored.prefix) and len(stored.prefix) == 12


def test_create_merchant_refuses_a_taken_name_unless_asked_for_a_new_key():
    """A second merchant with the same name is refused; --if-exists=new-key rotates instead."""
    call_command("create_merchant", "Shop", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("create_merchant", "Shop", stdout=StringIO())
    call_command("create_merchant", "Shop", "--if-exists=new-key", stdout=StringIO())
    assert Merchant.objects.count() == 1
    assert ApiKey.objects.count() == 2


def test_create_merchant_makes_several_merchants_each_key_after_its_line():
    """Several names in one command: each merchant's id line, then its key on the line after
    "API key"; every key stored by its hash only, under its own merchant."""
    out = StringIO()
    call_command("create_merchant", "Shop A", "Shop B", "Shop C", stdout=out)
    lines = out.getvalue().strip().splitlines()
    keys = [lines[i + 1] for i, line in enumerate(lines) if line.startswith("API key")]
    created = [line for line in lines if line.startswith("Created merchant")]
    assert [line.split("'")[1] for line in created] == ["Shop A", "Shop B", "Shop C"]
    assert len(set(keys)) == 3 and lines[-1] == keys[-1]
    for name, key in zip(["Shop A", "Shop B", "Shop C"], keys, strict=True):
        assert ApiKey.objects.get(key_hash=api_key_hash(key)).merchant.name == name


@pytest.mark.parametrize(
    "names",
    [["Shop A", "Shop A"], ["Shop A", " "], ["Shop A", "4242424242424242"]],
    ids=["repeated", "empty", "card-number"],
)
def test_create_merchant_refuses_a_bad_name_among_several_before_creating_any(names):
    """A repeated, empty or card-holding name among several: a CommandError naming no card
    number, and no merchant created, not even the good ones before it."""
    with pytest.raises(CommandError) as refused:
        call_command("create_merchant", *names, stdout=StringIO())
    assert "4242424242424242" not in str(refused.value)
    assert Merchant.objects.count() == 0


def test_demo_setup_prints_a_working_curl_example():
    """make run's banner holds an API key and curl commands."""
    out = StringIO()
    call_command("demo_setup", stdout=out)
    text = out.getvalue()
    key = next(line.split("=", 1)[1] for line in text.splitlines() if "export API_KEY=" in line)
    assert ApiKey.objects.filter(key_hash=api_key_hash(key)).exists()
    assert "curl -i -X POST http://127.0.0.1:8000/payments" in text


def test_openapi_schema_documents_the_payments_api(client):
    """/openapi.json is OpenAPI 3 with the payment endpoints and the Idempotency-Key header."""
    response = client.get("/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    post = schema["paths"]["/payments"]["post"]
    assert {"201", "202", "400", "409", "422", "503"} <= set(post["responses"])
    conflict = post["responses"]["409"]["content"]
    assert list(conflict) == ["application/problem+json"]
    assert conflict["application/problem+json"]["schema"]["$ref"].endswith("/Problem")
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in post["parameters"])
    assert "/payments/{payment_id}" in schema["paths"]
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    body = schema["components"]["schemas"]["PaymentCreateInputRequest"]
    assert body["properties"]["amount"]["maximum"] == 99_999_999_999


def test_docs_page_is_served(client):
    """/docs/ renders the Swagger UI page, with its assets served locally."""
    response = client.get("/docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()

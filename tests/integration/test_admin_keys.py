"""The operations console for idempotency keys and merchants' API keys."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.utils import timezone

from idempotency.models import IdempotencyKey
from merchants.models import ApiKey
from merchants.services import api_key_hash, api_key_issue, merchant_create
from tests.factories import MerchantFactory, PaymentFactory

pytestmark = pytest.mark.django_db

KEYS_URL = "/admin/idempotency/idempotencykey/"
MERCHANTS_URL = "/admin/merchants/merchant/"
ROLES_MIGRATION = importlib.import_module("payments.migrations.0004_operations_roles")
KEY_MANAGER_MIGRATION = importlib.import_module("payments.migrations.0008_key_manager_role")


def staff_client(client, role: str):
    ROLES_MIGRATION.create_roles(apps, None)
    KEY_MANAGER_MIGRATION.create_key_manager(apps, None)
    user = User.objects.create_user(f"{role}-1", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return client


@pytest.fixture
def operator(client):
    return staff_client(client, "operator")


@pytest.fixture
def support(client):
    return staff_client(client, "support")


@pytest.fixture
def key_manager(client):
    return staff_client(client, "key_manager")


def make_key(key: str = "order-1", *, expired: bool = False, status: str = "completed", **kw):
    now = timezone.now()
    expires_at = now - timedelta(hours=1) if expired else now + timedelta(hours=23)
    completed = status == "completed"
    return IdempotencyKey.objects.create(
        merchant=kw.pop("merchant", None) or MerchantFactory(), key=key, method="POST",
        route="/payments", request_fingerprint="ab" * 32, status=status,
        response_status=201 if completed else None,
        response_headers={"Content-Type": "application/json"} if completed else {},
        response_body=b'{"id":"pay_1","status":"succeeded"}' if completed else None,
        created_at=now - timedelta(hours=1), locked_at=None if completed else now,
        completed_at=now if completed else None, expires_at=expires_at,
    )  # fmt: skip


def listed_keys(response) -> set[str]:
    return {record.key for record in response.context["cl"].result_list}


# --- idempotency keys ----------------------------------------------------------------------


def test_key_detail_pretty_prints_the_stored_body_and_links_the_payment(support):
    """Status code, fingerprint, the body indented, and a link to the payment created."""
    record = make_key()
    payment = PaymentFactory(merchant=record.merchant, idempotency_key=record)
    page = support.get(f"{KEYS_URL}{record.pk}/change/").content.decode()
    assert (
        json.dumps({"id": "pay_1", "status": "succeeded"}, indent=2).replace('"', "&quot;") in page
    )
    assert "ab" * 32 in page and "201" in page
    assert f"/admin/payments/payment/{quote(payment.pk)}/change/" in page


def test_keys_filter_by_expired(support):
    """?expired=yes lists expired keys only, ?expired=no the live ones."""
    make_key("old", expired=True)
    make_key("live")
    assert listed_keys(support.get(KEYS_URL, {"expired": "yes"})) == {"old"}
    assert listed_keys(support.get(KEYS_URL, {"expired": "no"})) == {"live"}


def test_keys_filter_by_status(support):
    """?status__exact=in_progress lists keys still held by a request."""
    make_key("running", status="in_progress")
    make_key("done")
    assert listed_keys(support.get(KEYS_URL, {"status__exact": "in_progress"})) == {"running"}


def test_keys_search_is_an_exact_key_match(support):
    """The search finds a key by its exact value; a prefix finds nothing."""
    make_key("order-12")
    make_key("order-123")
    assert listed_keys(support.get(KEYS_URL, {"q": "order-12"})) == {"order-12"}
    assert listed_keys(support.get(KEYS_URL, {"q": "order-1"})) == set()


def test_keys_list_runs_a_bounded_number_of_queries(support, django_assert_max_num_queries):
    """Keys with their merchants and payments: a handful of queries for 40 rows."""
    for i in range(40):
        record = make_key(f"k-{i}")
        PaymentFactory(merchant=record.merchant, idempotency_key=record)
    with django_assert_max_num_queries(8):
        assert support.get(KEYS_URL, {"expired": "no"}).status_code == 200


def test_keys_are_read_only(operator):
    """No add page, and a POST to a key's change page is refused."""
    record = make_key()
    assert operator.get(f"{KEYS_URL}add/").status_code == 403
    assert (
        operator.post(f"{KEYS_URL}{record.pk}/change/", {"status": "in_progress"}).status_code
        == 403
    )


# --- merchants and API keys ----------------------------------------------------------------


def test_api_keys_are_listed_by_prefix_and_never_by_hash(support):
    """The merchant page shows each key's prefix; neither the key nor its hash appears."""
    merchant, issued = merchant_create(name="shop")
    page = support.get(f"{MERCHANTS_URL}{merchant.pk}/change/").content.decode()
    assert issued.api_key.prefix in page
    assert issued.raw not in page and issued.api_key.key_hash not in page


def test_rotate_key_confirms_before_issuing(key_manager):
    """GET shows a confirmation page and issues nothing."""
    merchant, _ = merchant_create(name="shop")
    response = key_manager.get(f"{MERCHANTS_URL}{merchant.pk}/rotate-key/")
    assert response.status_code == 200 and ApiKey.objects.count() == 1


def test_rotate_key_shows_the_new_key_once_and_stores_only_its_hash(key_manager):
    """POST issues a key shown in that answer only (no-store); the earlier key stays active."""
    merchant, first = merchant_create(name="shop")
    response = key_manager.post(f"{MERCHANTS_URL}{merchant.pk}/rotate-key/")
    new_key = response.context["new_key"]
    assert new_key in response.content.decode() and "no-store" in response["Cache-Control"]
    assert ApiKey.objects.get(key_hash=api_key_hash(new_key)).merchant == merchant
    assert ApiKey.objects.get(pk=first.api_key.pk).revoked_at is None
    assert new_key not in key_manager.get(f"{MERCHANTS_URL}{merchant.pk}/change/").content.decode()
    assert new_key not in str(list(LogEntry.objects.values_list("change_message", flat=True)))


def test_rotate_key_is_offered_as_an_action_on_one_merchant(key_manager):
    """The list action opens the rotate page of the one selected merchant."""
    merchant, _ = merchant_create(name="shop")
    response = key_manager.post(
        MERCHANTS_URL, {"action": "rotate_key_action", "_selected_action": [merchant.pk]}
    )
    assert response["Location"] == f"{MERCHANTS_URL}{merchant.pk}/rotate-key/"


def test_revoke_key_ends_it(key_manager):
    """Revoke (after a confirmation page) sets revoked_at."""
    merchant, issued = merchant_create(name="shop")
    url = f"{MERCHANTS_URL}{merchant.pk}/revoke-key/{issued.api_key.pk}/"
    assert key_manager.get(url).status_code == 200
    key_manager.post(url)
    assert ApiKey.objects.get(pk=issued.api_key.pk).revoked_at is not None


@pytest.mark.parametrize("role", ["support", "operator"])
def test_support_and_operators_cannot_rotate_or_revoke(client, role):
    """Both pages answer 403 to the support and operator roles (a new key would let them act
    as the merchant): that is the key_manager's permission. No key is issued or revoked."""
    staff = staff_client(client, role)
    merchant, issued = merchant_create(name="shop")
    assert staff.post(f"{MERCHANTS_URL}{merchant.pk}/rotate-key/").status_code == 403
    revoke = f"{MERCHANTS_URL}{merchant.pk}/revoke-key/{issued.api_key.pk}/"
    assert staff.post(revoke).status_code == 403
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 1
    page = staff.get(f"{MERCHANTS_URL}{merchant.pk}/change/").content.decode()
    assert "rotate-key/" not in page and "revoke-key/" not in page


def test_a_merchants_limits_are_set_on_its_page(admin_client):
    """Whoever may change merchants sets its own rate and in-flight cap; empty is the default."""
    merchant, _ = merchant_create(name="shop")
    url = f"{MERCHANTS_URL}{merchant.pk}/change/"
    page = admin_client.get(url)
    assert "concurrent_payments_limit" in page.content.decode()
    data = {"name": "shop", "rate_limit_requests": "120", "concurrent_payments_limit": ""}
    for inline in page.context["inline_admin_formsets"]:  # the keys' (read-only) inline
        formset = inline.formset
        for form in [formset.management_form, *formset.forms]:
            data |= {f.html_name: f.value() for f in form if f.value() is not None}
    answer = admin_client.post(url, data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    merchant.refresh_from_db()
    assert (merchant.rate_limit_requests, merchant.concurrent_payments_limit) == (120, None)


def test_the_merchant_page_shows_when_each_key_was_last_used_and_expires(support):
    """The keys' inline lists last_used_at and expires_at (a rotated key's end)."""
    merchant, _ = merchant_create(name="shop")
    api_key_issue(merchant=merchant)
    page = support.get(f"{MERCHANTS_URL}{merchant.pk}/change/").content.decode()
    assert "Last used at" in page and "Expires at" in page

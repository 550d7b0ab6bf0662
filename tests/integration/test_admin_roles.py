"""The support, operator and key_manager groups made by the roles data migrations (payments
0004, 0005, 0007, 0008)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.migrations.loader import MigrationLoader

pytestmark = pytest.mark.django_db

MIGRATION = "0004_operations_roles"
ROLES_MIGRATION = importlib.import_module(f"payments.migrations.{MIGRATION}")
BREAKER_MIGRATION = importlib.import_module("payments.migrations.0005_breaker_operator_permission")
LEDGER_MIGRATION = importlib.import_module("ledger.migrations.0002_audit_view_roles")
REFUND_MIGRATION = importlib.import_module("payments.migrations.0007_refunds_console")
KEY_MANAGER_MIGRATION = importlib.import_module("payments.migrations.0008_key_manager_role")
WEBHOOKS_MIGRATION = importlib.import_module("webhooks.migrations.0002_console_roles")

VIEW_PERMISSIONS = {
    "payments.view_payment",
    "payments.view_paymentevent",
    "idempotency.view_idempotencykey",
    "merchants.view_merchant",
    "merchants.view_apikey",
    "ledger.view_auditrun",
    "webhooks.view_webhookendpoint",
    "webhooks.view_event",
    "webhooks.view_delivery",
    "webhooks.view_deliveryattempt",
    "webhooks.view_operatoraction",
}
ACTION_PERMISSIONS = {
    "payments.reconcile_payment",
    "payments.resolve_payment",
    "webhooks.redeliver_event",
    "webhooks.enable_webhook_endpoint",
}
#: Migration 0008: rotating and revoking keys is the key_manager's, no longer the operator's.
KEY_MANAGER_PERMISSIONS = {
    "merchants.view_merchant",
    "merchants.view_apikey",
    "merchants.manage_api_keys",
}
#: Granted to operator by migration 0005 (the resilience page's breaker actions).
BREAKER_PERMISSIONS = {"payments.operate_breaker"}
#: Granted to operator by migration 0007 ("Refund" on a payment's page); never to support.
REFUND_PERMISSIONS = {"payments.refund_payment"}


def run_migration_function() -> None:
    """Run the migration's function with the historical models of its own state, then 0005's
    (a flush by an earlier transactional test may have removed what the migrations made)."""
    state = MigrationLoader(connection).project_state(("payments", MIGRATION))
    ROLES_MIGRATION.create_roles(state.apps, None)
    BREAKER_MIGRATION.grant_operate_breaker(apps, None)
    LEDGER_MIGRATION.grant_view(apps, None)
    REFUND_MIGRATION.grant_refund(apps, None)
    KEY_MANAGER_MIGRATION.create_key_manager(apps, None)
    WEBHOOKS_MIGRATION.grant(apps, None)


def permissions_of(role: str) -> set[str]:
    user = User.objects.create_user(f"{role}-user")
    user.groups.add(Group.objects.get(name=role))
    return {p for p in user.get_all_permissions() if not p.startswith(("auth.", "sessions."))}


def test_support_may_only_view():
    """support: the view permissions and nothing else."""
    run_migration_function()
    assert permissions_of("support") == VIEW_PERMISSIONS


def test_operator_may_view_and_act():
    """operator: the view permissions plus reconcile, resolve, operate_breaker and refund;
    not the keys' rotation."""
    run_migration_function()
    assert (
        permissions_of("operator")
        == VIEW_PERMISSIONS | ACTION_PERMISSIONS | BREAKER_PERMISSIONS | REFUND_PERMISSIONS
    )


def test_key_manager_may_view_merchants_and_manage_their_keys_only():
    """key_manager: merchants and keys (by prefix), and manage_api_keys; nobody else has it."""
    run_migration_function()
    assert permissions_of("key_manager") == KEY_MANAGER_PERMISSIONS
    operator = permissions_of("operator")
    assert "merchants.manage_api_keys" not in operator | permissions_of("support")
    assert "merchants.rotate_api_key" not in operator


def test_the_key_manager_migration_is_reversible():
    """Unapplying 0008 deletes key_manager and gives operator rotate_api_key back."""
    run_migration_function()
    KEY_MANAGER_MIGRATION.remove_key_manager(apps, None)
    assert not Group.objects.filter(name="key_manager").exists()
    assert "merchants.rotate_api_key" in permissions_of("operator")


def test_no_role_may_change_or_delete_payments_or_keys():
    """No group holds an add, change or delete permission."""
    run_migration_function()
    for group in Group.objects.filter(name__in=["support", "operator", "key_manager"]):
        codenames = set(group.permissions.values_list("codename", flat=True))
        assert not {c for c in codenames if c.startswith(("add_", "change_", "delete_"))}


def test_running_the_migration_again_changes_nothing():
    """Idempotent: a second run leaves two groups with the same permissions."""
    run_migration_function()
    before = {g.name: set(g.permissions.all()) for g in Group.objects.all()}
    run_migration_function()
    assert {g.name: set(g.permissions.all()) for g in Group.objects.all()} == before


def test_the_migration_is_reversible():
    """Unapplying it removes both groups and the custom permissions."""
    run_migration_function()
    ROLES_MIGRATION.remove_roles(apps, None)
    assert not Group.objects.filter(name__in=["support", "operator"]).exists()
    user = User.objects.create_user("nobody", is_superuser=False)
    assert not user.has_perm("payments.reconcile_payment")


def test_a_user_without_a_role_is_refused_the_console(client):
    """Staff without a group: the payments list answers 403."""
    user = User.objects.create_user("staff-only", is_staff=True)
    client.force_login(user)
    assert client.get("/admin/payments/payment/").status_code == 403


def test_refund_is_granted_to_operator_only_and_revocable():
    """0007: payments.refund_payment for operator, never support; reversing it removes it."""
    run_migration_function()
    assert "payments.refund_payment" not in permissions_of("support")
    assert "payments.refund_payment" in permissions_of("operator")
    REFUND_MIGRATION.revoke_refund(apps, None)
    operator = User.objects.create_user("operator-after")
    operator.groups.add(Group.objects.get(name="operator"))
    assert not operator.has_perm("payments.refund_payment")

"""The project's admin site and the console's generic package: how they are wired."""

from __future__ import annotations

import ast
from pathlib import Path

from django.contrib import admin

from config.admin import PaymentServiceAdminSite

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = {
    "config",
    "console",
    "gateway_client",
    "idempotency",
    "ledger",
    "merchants",
    "payments",
    "sandbox_acquirer",
}
ADMIN_MODULES = (
    "config/admin.py",
    "idempotency/admin.py",
    "merchants/admin.py",
    "payments/admin/payment.py",
    "payments/admin/resilience.py",
)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_admin_site_is_the_project_site_with_no_method_replaced():
    """admin.site is a PaymentServiceAdminSite whose methods are the class's own."""
    assert isinstance(admin.site, PaymentServiceAdminSite)
    assert not {"get_urls", "get_app_list"} & set(vars(admin.site))


def test_console_imports_no_project_package():
    """console/ stands below every app: Django only."""
    for path in (ROOT / "console").rglob("*.py"):
        found = {name.split(".")[0] for name in imports_of(path)} & PROJECT_PACKAGES
        assert found == set(), path


def test_admin_modules_act_on_the_acquirer_only_through_its_services():
    """No admin module builds the client or touches ``client.breakers``: selectors and
    services do."""
    for module in ADMIN_MODULES:
        path = ROOT / module
        found = imports_of(path)
        assert "payments.acquirer.client" not in found, module
        assert not any(
            name.startswith(("gateway_client.breaker", "resilience.breaker")) for name in found
        ), module
        attributes = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute)
        }
        assert "breakers" not in attributes, module

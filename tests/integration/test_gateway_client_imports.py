"""gateway_client stays framework-free: no Django, DRF, Celery or project package."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import gateway_client

FORBIDDEN = {
    "django",
    "rest_framework",
    "celery",
    "kombu",
    "payments",
    "idempotency",
    "config",
    "sandbox_acquirer",
}

PACKAGE_DIR = Path(gateway_client.__file__).resolve().parent


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Return (line, absolute module name) for every import in a file; relative ones skipped."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in {"import_module", "__import__"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_package_files_are_found() -> None:
    """The scan sees the package's modules (a guard against scanning nothing)."""
    names = {path.name for path in PACKAGE_DIR.rglob("*.py")}
    assert {"__init__.py", "client.py", "errors.py", "types.py", "classify.py"} <= names


def test_no_forbidden_imports_in_source() -> None:
    """No module under gateway_client imports Django, DRF, Celery, kombu or a project package."""
    offenders = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{line}: {module}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_import_loads_no_forbidden_module() -> None:
    """`import gateway_client` in a fresh interpreter leaves no forbidden module in sys.modules."""
    script = "import json, sys\nimport gateway_client\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        cwd=PACKAGE_DIR.parent,
    )
    loaded = json.loads(result.stdout)
    assert "gateway_client.client" in loaded
    assert sorted(name for name in loaded if name.split(".")[0] in FORBIDDEN) == []


PUBLIC = {
    "AcquirerClient", "AcquirerConfig", "AimdConfig", "AttemptRecord", "Authorization",
    "AuthorizationRequest",
    "BreakerConfig", "BreakerSnapshot", "CaptureRequest", "Clock", "LimiterSnapshot",
    "ManualClock", "MemoryStore", "RedisStore", "Refund", "RefundRequest", "RetryPolicy",
    "StateStore", "VoidRequest", "classify_exception",
    # the connector seam (dialect.py) and its dialects
    "Dialect", "SandboxDialect", "StripeDialect", "AdyenDialect", "WireRequest",
    "LookupUnsupported", "Received",
    # the notification connectors (notifications.py) and the dispute statuses (disputes.py)
    "MAX_NOTIFICATION_BYTES", "NotificationConnector", "NotificationRejected",
    "ProviderNotification", "OperationOutcome", "SandboxNotifications", "StripeNotifications",
    "AdyenNotifications", "standard_webhooks_signature", "stripe_signature_header",
    "ADYEN_DISPUTE_EVENTS", "ADYEN_DISPUTE_STATUSES", "CLOSED_DISPUTE_STATUSES",
    "STRIPE_DISPUTE_STATUSES", "DisputeNotice",
    # Adyen's verified items as the ledger's records (adyen_notifications.py)
    "NotificationError", "NotificationItem", "notification_items",
    # customer actions (types.py): an authorization waiting for the shopper
    "ActionRequired", "ActionDetailsRequest",
    # Stripe's listings for the ledger audit (stripe_listing.py)
    "STRIPE_LISTING_PAGE_SIZE", "stripe_listing_request", "stripe_listing_page",
    "stripe_listed_payment_intent", "stripe_listed_refund",
}  # fmt: skip


def test_the_public_surface_is_the_client_its_values_and_the_error_tree() -> None:
    """`__all__` lists the client's names and every GatewayError class, nothing internal; the
    names that moved to resilience are the same objects there."""
    import resilience
    from gateway_client import errors

    assert set(gateway_client.__all__) == PUBLIC | set(errors.__all__)
    assert all(hasattr(gateway_client, name) for name in gateway_client.__all__)
    assert not hasattr(gateway_client, "CircuitBreaker")  # the kit's: from resilience
    for name in PUBLIC & set(resilience.__all__):
        assert getattr(gateway_client, name) is getattr(resilience, name), name


def test_the_library_needs_neither_matplotlib_nor_bench() -> None:
    """The simulator and the gRPC throttle live in bench/: the package imports neither."""
    offenders = [
        f"{path.name}:{line}: {module}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[0] in {"matplotlib", "bench"}
    ]
    assert offenders == []

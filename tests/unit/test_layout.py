"""The agreed layout and the deployment files: checks that keep them true."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def procfile_commands() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_docker_compose_runs_the_procfile_commands():
    """Every Procfile process is a docker-compose service with the same command."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name, command in procfile_commands().items():
        assert services[name]["command"] == command, name


def test_docker_compose_has_the_agreed_services():
    """db (postgres:16 with a healthcheck), redis, web, worker, beat and sandbox."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"db", "redis", "web", "worker", "beat", "sandbox"} <= set(services)
    assert services["db"]["image"] == "postgres:16"
    assert "healthcheck" in services["db"]
    assert (
        services["web"]["environment"]["ACQUIRER_API_KEY"]
        == (services["sandbox"]["environment"]["SANDBOX_ACQUIRER_API_KEY"])
    )


def test_procfile_runs_api_worker_beat_and_sandbox():
    """`make run` starts these four processes."""
    assert set(procfile_commands()) == {"web", "worker", "beat", "sandbox", "sandbox-beta"}


def test_ci_runs_the_readme_test_command():
    """.ci/run runs `make test`, the command README.md gives a new user."""
    assert "make test" in (ROOT / "README.md").read_text()
    assert (ROOT / ".ci/run").read_text().rstrip().endswith("make test")


# Import direction (README, "Architecture"): payments -> idempotency -> merchants;
# payments -> webhooks (the outbox under the state machine), never back;
# gateway_client and the sandbox import no project app; merchant_client (a merchant's library)
# imports gateway_client only; nothing imports payments except config.
FORBIDDEN_IMPORTS = {
    "gateway_client": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                       "merchants", "config", "sandbox_acquirer"},
    "sandbox_acquirer": {"django", "rest_framework", "celery", "payments", "idempotency",
                         "merchants", "config", "gateway_client"},
    "idempotency": {"payments", "gateway_client", "sandbox_acquirer"},
    "merchants": {"payments", "idempotency", "gateway_client", "sandbox_acquirer"},
    "payments": {"sandbox_acquirer"},
    "webhooks": {"payments", "ledger", "sandbox_acquirer", "config"},
    "ledger": {"sandbox_acquirer", "gateway_client"},
    # The card-number detector is plain Python: every layer uses it, it uses nothing.
    "card_data": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                  "merchants", "config", "gateway_client", "sandbox_acquirer", "ledger",
                  "console"},
    "heartbeats": {"payments", "idempotency", "merchants", "ledger", "gateway_client",
                   "sandbox_acquirer"},
    "merchant_client": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                        "merchants", "config", "sandbox_acquirer", "ledger", "console"},
    # bench/ measures performance; campaigns/ proves correctness under faults: neither uses
    # the other (make bench and make campaign stay separate).
    "bench": {"campaigns"},
    "campaigns": {"bench"},
}  # fmt: skip


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_import_direction():
    """No package imports what the import direction forbids."""
    violations = []
    for package, forbidden in FORBIDDEN_IMPORTS.items():
        for path in (ROOT / package).rglob("*.py"):
            bad = imported_top_levels(path) & forbidden
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


# --- Modules and their imports, module-level and function-level alike --------------------------

#: Every package of the project (tests excluded): the cycle check covers all of them.
PROJECT_PACKAGES = (
    "config", "console", "merchants", "idempotency", "payments", "gateway_client",
    "sandbox_acquirer", "ledger", "webhooks", "bench", "campaigns", "scripts", "heartbeats",
    "card_data", "merchant_client",
)  # fmt: skip


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of :data:`PROJECT_PACKAGES`
    (a package is named by its ``__init__.py``)."""
    modules = {}
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (at module level, inside a
    function, under ``if``): ``from a import b`` counts as ``a.b`` when that is a module, else
    as ``a``; ``import a.b.func``-like names fall back to the longest module prefix. The
    packages a module's import implies (its parents) are not counted."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from a import b`: the module a.b when there is one, else (a name in a) a.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `from a.b import func` -> a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


#: Cycles known today, each to be removed by the step named beside it (not a licence: a new
#: cycle fails the test, and an entry is deleted when its cycle is gone).
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycles():
    """No circle of imports between the project's modules, counting the imports inside
    functions (an import moved into a function still makes a circle)."""
    cycles = [cycle for cycle in import_cycles(import_graph()) if cycle not in KNOWN_CYCLES]
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    """The check itself: a two-module and a three-module circle are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert import_cycles(graph) == [["a", "b"], ["c", "d", "e"]]


# --- The floor plan of payments/ ----------------------------------------------------------------

#: The layers of ``payments/``, top first: a module imports modules of its own layer or below,
#: never above. Every module must be listed (a new module fails the test until it is placed).
#: Names are relative to ``payments``; modules another step creates may be absent.
PAYMENTS_LAYERS: list[tuple[str, set[str]]] = [
    (
        "interfaces: call services, build nothing",
        {
            "apis", "admin", "operations", "tasks", "health", "apps", "forms", "metrics_views",
            "resilience_admin", "webhook_apis", "management.commands.demo_setup",
            "management.commands.reconcile_payments", "deferred_tasks",
            "management.commands.submit_deferred_payments",
        },
    ),
    (
        "services: the create flow, the operations after it, reconciliation",
        {
            "services", "lifecycle_services", "reconciliation", "operation_reconciliation",
            "reconciliation_schedule", "deferral", "deferred", "failover",
        },
    ),
    (
        "primitives: the state machine, the acquirer boundary, the answers",
        {
            "lifecycle", "responses", "crashpoints", "limits", "acquirer", "acquirer.client",
            "acquirer.authorize", "acquirer.metrics", "acquirer.collectors",
            "acquirer.selectors", "acquirer.services", "acquirer.operations", "acquirer.routing",
        },
    ),
    (
        "reads and shapes: queries, serializers, counters, input checks",
        {"selectors", "serializers", "metrics", "card_data", "parsers", "webhook_serializers"},
    ),
    ("models and values", {"models", "money", "problems", "checks"}),
]  # fmt: skip

#: Package markers without code, and Django's generated migrations: not part of the layers.
PAYMENTS_UNLAYERED = {"", "management", "management.commands", "migrations"}

#: Upward imports allowed, each with its reason.
PAYMENTS_UPWARD_ALLOWED = {
    # A Celery task is enqueued by importing its task object (``.apply_async`` after a 202).
    ("services", "tasks"),
    ("lifecycle_services", "tasks"),
}


def payments_layer(name: str) -> int | None:
    """The index of ``name``'s layer in :data:`PAYMENTS_LAYERS` (0 = top), or None."""
    return next((i for i, (_, names) in enumerate(PAYMENTS_LAYERS) if name in names), None)


def payments_modules(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The payments modules (relative names) and the payments modules each imports."""
    relative = {
        name.removeprefix("payments").removeprefix("."): {
            target.removeprefix("payments.") for target in targets if target.startswith("payments.")
        }
        for name, targets in graph.items()
        if name == "payments" or name.startswith("payments.")
    }
    return {
        name: targets
        for name, targets in relative.items()
        if name not in PAYMENTS_UNLAYERED and not name.startswith("migrations.")
    }


def test_every_payments_module_has_a_layer():
    """A new module in payments/ is placed in PAYMENTS_LAYERS (or the test fails)."""
    unlisted = sorted(m for m in payments_modules(import_graph()) if payments_layer(m) is None)
    assert unlisted == [], f"add to PAYMENTS_LAYERS: {unlisted}"


def test_payments_modules_import_only_their_layer_or_below():
    """Interfaces -> services -> primitives -> reads and shapes -> models: no upward import,
    at module level or inside a function, except the listed ones."""
    upward = []
    for name, targets in payments_modules(import_graph()).items():
        for target in sorted(targets):
            layer, target_layer = payments_layer(name), payments_layer(target)
            if layer is None or target_layer is None:
                continue  # reported by test_every_payments_module_has_a_layer
            if target_layer < layer and (name, target) not in PAYMENTS_UPWARD_ALLOWED:
                upward.append(f"payments.{name} imports payments.{target}")
    assert upward == []


def test_reconciliation_and_operations_do_not_stand_on_the_create_flow():
    """reconciliation (its shared schedule too) and operations use lifecycle and acquirer,
    never services; tasks use reconciliation, never services."""
    modules = payments_modules(import_graph())
    for name in (
        "reconciliation",
        "operation_reconciliation",
        "reconciliation_schedule",
        "failover",
        "operations",
        "tasks",
    ):
        assert "services" not in modules[name], name
        assert "lifecycle_services" not in modules[name], name

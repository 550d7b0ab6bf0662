"""The agreed layout and the deployment files: checks that keep them true."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per run: a dozen checks read the same files."""
    return ast.parse(path.read_text(), filename=str(path))


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
    """db (postgres:16 with a healthcheck), redis, web, worker, webhooks, beat and sandbox."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"db", "redis", "web", "worker", "webhooks", "beat", "sandbox"} <= set(services)
    assert services["db"]["image"].startswith("postgres:16@sha256:")
    assert "healthcheck" in services["db"]
    assert (
        services["web"]["environment"]["ACQUIRER_API_KEY"]
        == (services["sandbox"]["environment"]["SANDBOX_ACQUIRER_API_KEY"])
    )


def test_procfile_runs_api_worker_beat_and_sandbox():
    """`make run` starts these processes (webhooks: the deliveries' own worker, ADR 0050)."""
    assert set(procfile_commands()) == {
        "web", "worker", "webhooks", "beat", "sandbox", "sandbox-beta",
    }  # fmt: skip


def test_ci_runs_the_readme_test_command():
    """.ci/run runs `make test`, the command README.md gives a new user."""
    assert "make test" in (ROOT / "README.md").read_text()
    assert (ROOT / ".ci/run").read_text().rstrip().endswith("make test")


# Import direction (README, "Architecture"): payments -> idempotency -> merchants;
# payments -> webhooks (the outbox under the state machine), never back;
# resilience imports no framework and no project package; gateway_client imports resilience and
# no project app; the sandbox imports neither; merchant_client (a merchant's library) imports
# gateway_client and resilience only; nothing imports payments except config.
# config is wiring only (ADR 0036): it imports the apps, no app imports it; observability,
# devtools and acquirers sit below the apps and import none of them (card_data only).
APPS = (
    "payments", "webhooks", "merchants", "idempotency", "ledger", "heartbeats", "console",
    "card_data", "sandbox_acquirer", "gateway_client", "merchant_client", "retention",
)  # fmt: skip
#: The packages below the apps (ADR 0036).
BELOW_THE_APPS = ("observability", "devtools", "acquirers")
FORBIDDEN_IMPORTS = {
    "resilience": {"django", "rest_framework", "celery", "kombu", "config", "console",
                   "merchants", "idempotency", "payments", "gateway_client", "sandbox_acquirer",
                   "ledger", "webhooks", "bench", "scripts", "heartbeats", "card_data",
                   "merchant_client", "tests", "observability", "devtools", "acquirers",
                   "campaigns", "retention"},
    "gateway_client": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                       "merchants", "config", "sandbox_acquirer"},
    "sandbox_acquirer": {"django", "rest_framework", "celery", "payments", "idempotency",
                         "merchants", "config", "gateway_client"},
    "idempotency": {"payments", "gateway_client", "sandbox_acquirer"},
    "merchants": {"payments", "idempotency", "gateway_client", "sandbox_acquirer"},
    "payments": {"sandbox_acquirer", "retention"},
    "webhooks": {"payments", "ledger", "sandbox_acquirer", "config", "retention"},
    "ledger": {"sandbox_acquirer", "gateway_client", "retention"},
    # The card-number detector is plain Python: every layer uses it, it uses nothing.
    "card_data": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                  "merchants", "config", "gateway_client", "sandbox_acquirer", "ledger",
                  "console"},
    "heartbeats": {"payments", "idempotency", "merchants", "ledger", "gateway_client",
                   "sandbox_acquirer"},
    "merchant_client": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                        "merchants", "config", "sandbox_acquirer", "ledger", "console"},
    "console": {"config", "payments", "idempotency", "merchants", "ledger", "webhooks",
                "heartbeats", "gateway_client", "sandbox_acquirer"},
    # Observability: no app, no config, no Celery (config/celery_app.py wires it in).
    "observability": {"config", "payments", "idempotency", "merchants", "ledger", "webhooks",
                      "heartbeats", "console", "gateway_client", "sandbox_acquirer",
                      "merchant_client", "devtools", "acquirers", "celery", "rest_framework"},
    # Developer tools: no app, no config; nothing of the service's own runtime.
    "devtools": {"config", "payments", "idempotency", "merchants", "ledger", "webhooks",
                 "heartbeats", "console", "gateway_client", "sandbox_acquirer",
                 "merchant_client", "observability", "acquirers", "card_data", "celery",
                 "rest_framework"},
    # The ACQUIRERS setting's parser: plain Python (and ImproperlyConfigured), loaded by the
    # settings, so it imports no app and no config.
    "acquirers": {"config", "payments", "idempotency", "merchants", "ledger", "webhooks",
                  "heartbeats", "console", "gateway_client", "sandbox_acquirer",
                  "merchant_client", "observability", "devtools", "card_data", "celery",
                  "rest_framework"},
    # Retention sits above every app whose rows it purges; it calls out to nothing but
    # PostgreSQL and Redis, and no app imports it (config schedules it).
    "retention": {"config", "gateway_client", "sandbox_acquirer", "merchant_client", "console",
                  "bench", "campaigns"},
    # bench/ measures performance; campaigns/ proves correctness under faults: neither uses
    # the other (make bench and make campaign stay separate).
    "bench": {"campaigns"},
    "campaigns": {"bench"},
}  # fmt: skip


@functools.cache
def imported_top_levels(path: Path) -> frozenset[str]:
    tree = parsed(path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return frozenset(names)


def test_no_app_imports_config():
    """config is wiring only (ADR 0036): no app, nor a package below the apps, imports it, at
    module level or inside a function (a settings-module string such as
    ``"config.settings.test"`` is not an import)."""
    violations = [
        f"{path.relative_to(ROOT)} imports config"
        for package in (*APPS, *BELOW_THE_APPS)
        for path in (ROOT / package).rglob("*.py")
        if "config" in imported_top_levels(path)
    ]
    assert violations == []


def test_settings_import_no_app():
    """Loading the settings imports no app (ADR 0036): what they need from below (the
    logging configuration, the ACQUIRERS parser, the embedded servers) comes from
    observability, acquirers and devtools; a rule an app owns is a system check of that app."""
    apps = set(APPS) - {"card_data"}
    violations = [
        f"{path.relative_to(ROOT)} imports {sorted(imported_top_levels(path) & apps)}"
        for path in [
            *(ROOT / "config" / "settings").rglob("*.py"),
            ROOT / "config" / "database.py",
            ROOT / "config" / "pooler.py",
        ]
        if imported_top_levels(path) & apps
    ]
    assert violations == []


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
    "card_data", "merchant_client", "observability", "devtools", "acquirers", "resilience",
    "retention",
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
    for node in ast.walk(parsed(path)):
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


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, built once per run (do not mutate)."""
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


def test_resilience_imports_no_project_package_at_all():
    """The kit stands below every package of the project: FORBIDDEN_IMPORTS names them all."""
    assert set(PROJECT_PACKAGES) - {"resilience"} <= FORBIDDEN_IMPORTS["resilience"]


# --- The kit and the acquirer client: public names only, files of a readable size -------------

#: The packages built on resilience and gateway_client: they import the packages' names only.
KIT_USERS = ("webhooks", "payments", "merchant_client")

#: No file of these packages is longer (lines): a longer one is split along a seam.
MAX_LINES = 600


def kit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for each import of a gateway_client or resilience module in ``path``,
    at module level or inside a function: ``import a.b`` and ``from a.b import c`` give
    ``a.b``, ``from a import b`` gives ``a`` (the package's own name ``b``)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return [(n, m) for n, m in found if m.split(".")[0] in {"gateway_client", "resilience"}]


def test_kit_users_import_only_the_packages_public_names():
    """webhooks, payments and merchant_client import ``gateway_client`` and ``resilience``
    themselves (their ``__all__``), never a module inside them, and only names in
    ``__all__``."""
    import gateway_client
    import resilience

    public = {"gateway_client": set(gateway_client.__all__), "resilience": set(resilience.__all__)}
    offenders = []
    for package in KIT_USERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = parsed(path)
            for line, module in kit_imports(path):
                if module not in public:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {module}")
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in public:
                    hidden = {a.name for a in node.names} - public[node.module]
                    if hidden:
                        rel = path.relative_to(ROOT)
                        offenders.append(f"{rel}:{node.lineno}: {node.module} {sorted(hidden)}")
    assert offenders == []


def test_gateway_client_uses_no_private_module_of_resilience():
    """gateway_client stands on resilience's modules, never on one named ``_...``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "gateway_client").rglob("*.py"))
        for line, module in kit_imports(path)
        if any(part.startswith("_") for part in module.split(".")[1:])
    ]
    assert offenders == []


def test_no_file_of_gateway_client_or_resilience_is_over_600_lines():
    """Every ``.py`` file of gateway_client/ and resilience/ has at most MAX_LINES lines."""
    long = {
        str(path.relative_to(ROOT)): count
        for package in ("gateway_client", "resilience")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# --- The rooms of payments/ (docs/adr/0037-rooms-inside-payments.md) -----------------------------

#: The sub-packages ("rooms") of ``payments/``, top floor first: a module imports modules of its
#: own room or of a room on a lower floor, never of a room above it; rooms on one floor do not
#: import each other. Every module of payments/ belongs to a room (a new sub-package fails the
#: test until it is placed). ``payments.models`` stays where Django expects it and belongs to
#: core; the app's own files (``apps``, ``checks``, ``tasks`` for Celery's autodiscovery, the
#: package) and the management commands
#: stand on the top floor.
PAYMENTS_FLOORS: list[tuple[str, set[str]]] = [
    ("interfaces: the HTTP API, the admin console, the app and its commands",
     {"api", "admin", "management", "app"}),
    ("the flows after the authorization: capture, void, refund", {"operations"}),
    ("the create flow: key claim, phase 1, failover, deferral", {"authorization"}),
    ("provider notifications: intake, apply (a hint to re-fetch, or a dispute's record)",
     {"notifications"}),
    ("reconciliation: the schedule, payments, operations, the beat tasks", {"reconciliation"}),
    ("monitoring: counters, /metrics, health", {"monitoring"}),
    ("the acquirer boundary: the only calls out", {"acquirer"}),
    ("core: both state machines, every write, money, the stored answers", {"core"}),
]  # fmt: skip

#: Modules at the top of payments/ and the room each belongs to.
PAYMENTS_ROOT_MODULES = {
    "": "app",
    "apps": "app",
    "checks": "app",
    "tasks": "app",
    "models": "core",
}

#: Django's generated migrations: not part of the rooms.
PAYMENTS_UNPLACED = ("migrations",)


def payments_room(name: str) -> str | None:
    """The room of a payments module (``name`` relative to ``payments``), or None for one
    outside the rooms (migrations) or not placed."""
    if name in PAYMENTS_ROOT_MODULES:
        return PAYMENTS_ROOT_MODULES[name]
    first = name.split(".")[0]
    if first in PAYMENTS_UNPLACED:
        return None
    return first if any(first in rooms for _, rooms in PAYMENTS_FLOORS) else None


def payments_floor(room: str) -> int:
    """The index of ``room``'s floor in :data:`PAYMENTS_FLOORS` (0 = top)."""
    return next(i for i, (_, rooms) in enumerate(PAYMENTS_FLOORS) if room in rooms)


def payments_modules(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The payments modules (relative names, ``""`` for the package) and the payments modules
    each imports, migrations left out."""
    return {
        name.removeprefix("payments").removeprefix("."): {
            target.removeprefix("payments").removeprefix(".")
            for target in targets
            if target == "payments" or target.startswith("payments.")
        }
        for name, targets in graph.items()
        if (name == "payments" or name.startswith("payments."))
        and not name.startswith("payments.migrations")
    }


def test_every_payments_module_is_in_a_room():
    """A module of payments/ sits in a room of PAYMENTS_FLOORS (or the test fails)."""
    unplaced = sorted(m for m in payments_modules(import_graph()) if payments_room(m) is None)
    assert unplaced == [], f"place in PAYMENTS_FLOORS or PAYMENTS_ROOT_MODULES: {unplaced}"


#: Imports against the direction, each with its reason and the step that removes it (not a
#: licence: a new one fails the test, and an entry is deleted when its import is gone).
PAYMENTS_AGAINST_THE_DIRECTION: set[tuple[str, str]] = set()


def test_payments_rooms_import_only_their_floor_or_below():
    """api and admin -> operations -> authorization -> reconciliation -> monitoring -> acquirer
    -> core: no import upward and none sideways between two rooms of one floor, at module
    level or inside a function, except the listed ones."""
    wrong = []
    for name, targets in payments_modules(import_graph()).items():
        room = payments_room(name)
        for target in sorted(targets):
            target_room = payments_room(target)
            if room is None or target_room is None or target_room == room:
                continue
            if (name, target) in PAYMENTS_AGAINST_THE_DIRECTION:
                continue
            if payments_floor(target_room) <= payments_floor(room):
                wrong.append(f"payments.{name} ({room}) imports payments.{target} ({target_room})")
    assert wrong == []


def test_no_room_imports_another_rooms_private_modules():
    """A module named ``_name`` is its sub-package's own: nothing outside that sub-package
    imports it."""
    wrong = []
    for name, targets in import_graph().items():
        for target in targets:
            package, _, leaf = target.rpartition(".")
            if (
                leaf.startswith("_")
                and not leaf.startswith("__")
                and not (name == package or name.startswith(package + "."))
            ):
                wrong.append(f"{name} imports {target}")
    assert wrong == []


def test_the_listed_exceptions_still_exist():
    """An exception whose import is gone is deleted from the list."""
    modules = payments_modules(import_graph())
    gone = [(a, b) for a, b in PAYMENTS_AGAINST_THE_DIRECTION if b not in modules.get(a, set())]
    assert gone == []


def test_each_room_says_what_it_holds_and_may_import():
    """Every sub-package's ``__init__.py`` has a docstring naming what the room holds and what it
    may import."""
    for _, rooms in PAYMENTS_FLOORS:
        for room in rooms - {"app"}:
            init = ROOT / "payments" / room / "__init__.py"
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            if room == "management":
                continue  # Django's commands folder: command names are the interface
            assert "May import" in doc, room


#: The longest a module of payments/ may be.
PAYMENTS_MAX_LINES = 600


def test_no_payments_file_is_above_600_lines():
    """A module over 600 lines holds more than one thing: split it."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "payments").rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > PAYMENTS_MAX_LINES
    }
    assert long == {}


def test_the_flows_do_not_stand_on_each_other_backwards():
    """reconciliation and the acquirer never use the create flow or the operation flows; core
    never imports the acquirer (it records what a call established, it makes none)."""
    modules = payments_modules(import_graph())
    for name, targets in modules.items():
        room = payments_room(name)
        if room in {"reconciliation", "acquirer", "core", "monitoring"}:
            assert not any(t.startswith(("authorization", "operations")) for t in targets), name
        if room == "core":
            assert not any(t.startswith("acquirer") for t in targets), name


def test_no_payments_module_writes_an_idempotency_keys_columns():
    """The idempotency app owns its table: payments reaches a key's columns only through its
    functions (``idempotency_key_complete`` and its one-statement form), never through the
    model's table or fields (``IdempotencyKey._meta``)."""
    writers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "payments").rglob("*.py")
        if "IdempotencyKey._meta" in path.read_text()
    ]
    assert writers == []

"""docs/configuration.md and .env.example list exactly the environment variables the code reads.

Scope. "The service's variables" are those read by the code that runs when the service runs:
``config/`` (the settings through django-environ, ``gunicorn.conf.py``, ``celery_app.py``,
``wsgi.py``), ``observability/`` (logging, metrics directory), ``devtools/`` (the embedded
PostgreSQL and Redis of ``make run``), ``acquirers/``, ``manage.py``, the apps (``merchants``,
``idempotency``, ``payments``, ``ledger``, ``console``), ``gateway_client`` (which reads none
by design) and ``sandbox_acquirer`` (started by ``make run``). docs/configuration.md lists each
of them in its "The service's variables" section, and .env.example lists each of them
(commented defaults).
The variables read only by the tools (``bench/``, ``campaigns/``, ``scripts/``, ``tests/``) are
listed in the section "Variables of the tools" and nowhere else; they do not belong in a
deployment's ``.env``.

A read is ``env("X")`` or ``env.<cast>("X", ...)`` (django-environ, any cast: int, bool, str,
float, list, db, ...), ``os.environ.get("X")``, ``os.environ.setdefault("X", ...)``,
``os.environ["X"]``, ``os.getenv("X")``; ``X`` is a string literal or a module-level string
constant. A variable missing on either side fails the test with its name.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE_SOURCES = (
    "config",
    "observability",
    "devtools",
    "acquirers",
    "console",
    "manage.py",
    "merchants",
    "idempotency",
    "payments",
    "ledger",
    "webhooks",
    "gateway_client",
    "resilience",
    "sandbox_acquirer",
)
TOOL_SOURCES = ("bench", "campaigns", "scripts", "tests")
SERVICE_SECTION = "## The service's variables"
TOOLS_SECTION = "## Variables of the tools"
NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")
ENV_EXAMPLE_LINE = re.compile(r"^#?\s*([A-Z][A-Z0-9_]*)=")


def python_files(*sources: str) -> list[Path]:
    files: list[Path] = []
    for source in sources:
        path = ROOT / source
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return [f for f in files if "migrations" not in f.parts]


def _is_os_environ(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _is_env_reader(func: ast.expr) -> bool:
    """``env(...)``, ``env.int(...)``, ``os.environ.get(...)``, ``os.getenv(...)`` and the like."""
    if isinstance(func, ast.Name):
        return func.id == "env"
    if not isinstance(func, ast.Attribute):
        return False
    if isinstance(func.value, ast.Name) and func.value.id == "env":
        return True
    if _is_os_environ(func.value) and func.attr in ("get", "setdefault", "pop"):
        return True
    return isinstance(func.value, ast.Name) and func.value.id == "os" and func.attr == "getenv"


@functools.cache
def variables_read(path: Path) -> frozenset[str]:
    """The environment variable names that ``path`` reads (each file scanned once per run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def name_of(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id)
        return None

    names: set[str] = set()
    for node in ast.walk(tree):
        argument = None
        if isinstance(node, ast.Call) and node.args and _is_env_reader(node.func):
            argument = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            argument = node.slice
        name = name_of(argument) if argument is not None else None
        if name and re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            names.add(name)
    return frozenset(names)


def read_by(*sources: str) -> set[str]:
    return set().union(*(variables_read(path) for path in python_files(*sources)))


def documented(section: str) -> set[str]:
    """Variable names in the first column of the tables of ``section`` of configuration.md."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert section in text, f"docs/configuration.md has no section {section!r}"
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in body.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            names.update(NAME.findall(line.split("|")[1]))
    return names


def in_env_example() -> set[str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return {m.group(1) for line in lines if (m := ENV_EXAMPLE_LINE.match(line))}


def assert_same(expected: set[str], listed: set[str], where: str) -> None:
    missing, extra = sorted(expected - listed), sorted(listed - expected)
    assert not missing, f"read by the code but not listed in {where}: {', '.join(missing)}"
    assert not extra, f"listed in {where} but read by no code: {', '.join(extra)}"


def test_the_scan_finds_the_settings_variables() -> None:
    """The scan itself works: it finds reads of every kind the settings use."""
    found = read_by(*SERVICE_SOURCES)
    assert {"DJANGO_SECRET_KEY", "DJANGO_DEBUG", "DJANGO_ALLOWED_HOSTS"} <= found  # env, bool, list
    assert {"API_MAX_BODY_BYTES", "ACQUIRER_DEADLINE_SECONDS"} <= found  # env.int, env.float
    assert {"DATABASE_URL", "PGSERVER_DATA_DIR", "WEB_BIND"} <= found  # env.db, os.environ.get
    assert "SANDBOX_ACQUIRER_API_KEY" in found  # through a module-level constant


def test_configuration_md_lists_every_service_variable() -> None:
    """docs/configuration.md's service section names exactly the variables the service reads."""
    assert_same(read_by(*SERVICE_SOURCES), documented(SERVICE_SECTION), "docs/configuration.md")


def test_env_example_lists_every_service_variable() -> None:
    """.env.example names exactly the variables the service reads."""
    assert_same(read_by(*SERVICE_SOURCES), in_env_example(), ".env.example")


def test_configuration_md_lists_the_tools_variables() -> None:
    """The tools section names exactly the variables only the benchmarks, scripts and tests read."""
    tools_only = read_by(*TOOL_SOURCES) - read_by(*SERVICE_SOURCES)
    assert_same(tools_only, documented(TOOLS_SECTION), "docs/configuration.md (tools)")

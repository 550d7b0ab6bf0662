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
    assert set(procfile_commands()) == {"web", "worker", "beat", "sandbox"}


def test_ci_runs_the_readme_test_command():
    """.ci/run runs `make test`, the command README.md gives a new user."""
    assert "make test" in (ROOT / "README.md").read_text()
    assert (ROOT / ".ci/run").read_text().rstrip().endswith("make test")


# Import direction (STYLE.md): payments -> idempotency -> merchants; gateway_client and the
# sandbox import no project app; nothing imports payments except config.
FORBIDDEN_IMPORTS = {
    "gateway_client": {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
                       "merchants", "config", "sandbox_acquirer"},
    "sandbox_acquirer": {"django", "rest_framework", "celery", "payments", "idempotency",
                         "merchants", "config", "gateway_client"},
    "idempotency": {"payments", "gateway_client", "sandbox_acquirer"},
    "merchants": {"payments", "idempotency", "gateway_client", "sandbox_acquirer"},
    "payments": {"sandbox_acquirer"},
    "ledger": {"sandbox_acquirer", "gateway_client"},
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
    """No package imports what STYLE.md's arrows forbid."""
    violations = []
    for package, forbidden in FORBIDDEN_IMPORTS.items():
        for path in (ROOT / package).rglob("*.py"):
            bad = imported_top_levels(path) & forbidden
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []

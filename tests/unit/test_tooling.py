"""The tooling people use to help themselves, kept true: lint in CI, hooks, the image."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pre_commit_hooks() -> dict[str, dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def lint_requirement(name: str) -> str:
    for requirement in pyproject()["project"]["optional-dependencies"]["lint"]:
        if re.match(rf"{re.escape(name)}\b", requirement):
            return requirement
    raise AssertionError(f"{name} is not in the lint extra")


def test_pre_commit_runs_the_agreed_hooks():
    """ruff (check and format), django-upgrade, detect-private-key and mypy on resilience,
    gateway_client and merchant_client."""
    hooks = pre_commit_hooks()
    assert {"ruff-check", "ruff-format", "django-upgrade", "detect-private-key", "mypy"} <= set(
        hooks
    )
    assert "--target-version 5.2" in hooks["django-upgrade"]["entry"]
    assert hooks["mypy"]["args"] == ["resilience", "gateway_client", "merchant_client"]


def test_hooks_call_the_pinned_tools_of_the_lint_extra():
    """Each hook's program is pinned in the lint extra, so hooks, make lint and CI agree."""
    for hook in pre_commit_hooks().values():
        assert hook["language"] == "system", hook["id"]
    for tool in ("ruff", "pre-commit-hooks", "django-upgrade"):
        assert "==" in lint_requirement(tool), tool
    lint_requirement("mypy")
    lint_requirement("pre-commit")


def test_ci_runs_lint_before_the_tests():
    """.ci/run runs `make lint`, then `make test` last."""
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert lines.index("make lint") < lines.index("make test") == len(lines) - 1
    assert "pre-commit run --all-files" in (ROOT / "Makefile").read_text()


def test_mypy_is_strict_on_gateway_client():
    """resilience, gateway_client and merchant_client ship py.typed, so they are type-checked
    strictly."""
    mypy = pyproject()["tool"]["mypy"]
    for package in ("resilience", "gateway_client", "merchant_client"):
        assert (ROOT / package / "py.typed").exists()
        assert package in mypy["files"]
        assert "py.typed" in pyproject()["tool"]["setuptools"]["package-data"][package]
    assert mypy.get("strict") is True or any(
        override.get("strict") is True for override in mypy.get("overrides", [])
    )


def test_docker_image_copies_every_installed_package():
    """The Dockerfile COPYs each package that pyproject.toml installs (a new app is not lost):
    the service's into the runtime stage, the sandbox acquirer into its own stage only, and
    devtools (the embedded PostgreSQL and Redis of make run / make test) into neither."""
    include = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    dockerfile = (ROOT / "Dockerfile").read_text()
    sandbox, runtime = dockerfile.split("AS runtime")
    copied = set(re.findall(r"^COPY (\S+) \1$", runtime, re.M))
    assert packages - {"sandbox_acquirer", "merchant_client", "devtools"} <= copied, sorted(
        packages - copied
    )
    assert "sandbox_acquirer" not in copied
    assert "devtools" not in copied
    assert "COPY sandbox_acquirer sandbox_acquirer" in sandbox.split("AS sandbox")[1]


def test_metrics_dir_prepare_empties_a_configured_directory_and_exports_it(tmp_path, monkeypatch):
    """A configured PROMETHEUS_MULTIPROC_DIR keeps its other files but loses a previous run's
    counters; unset, a directory of its own is made, exported, and removed at the end."""
    from observability import metrics_dir

    configured = tmp_path / "metrics"
    configured.mkdir()
    (configured / "counter_123.db").write_bytes(b"old")
    (configured / "README").write_text("kept")
    monkeypatch.setenv(metrics_dir.ENV, str(configured))
    assert metrics_dir.metrics_dir_prepare("web") == configured
    assert sorted(p.name for p in configured.iterdir()) == ["README"]
    metrics_dir.metrics_dir_remove()
    assert configured.exists()

    monkeypatch.delenv(metrics_dir.ENV)
    made = metrics_dir.metrics_dir_prepare("worker")
    assert made.is_dir() and made.name.startswith("payments-metrics-worker-")
    assert os.environ[metrics_dir.ENV] == str(made)
    metrics_dir.metrics_dir_remove()
    assert not made.exists()

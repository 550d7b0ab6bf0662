"""A pytest plugin for ``make test-fast`` (``-p tests.support.fast_lane``), which keeps that lane
fast by construction: a test there that starts a process fails at once with its name, and a
test that would use the database stops the run before any test starts (no test database is
created). Such tests belong in tests/integration or tests/e2e, which ``make test`` runs."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

# Without DATABASE_URL the test settings would start the embedded PostgreSQL when they load
# (config/database.py), seconds of a lane that uses no database and a server left running. An
# address nothing answers on instead: the settings load, and a test that reached the database
# anyway (past the check below) would fail to connect, naming it.
os.environ.setdefault("DATABASE_URL", "postgres://fast-lane@127.0.0.1:9/fast_lane_uses_no_database")

_MESSAGE = (
    "make test-fast runs no subprocess, and this test started one ({what}): move it to "
    "tests/integration (or tests/e2e), which make test runs"
)


#: The pytest-django fixtures that give a test the database.
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_setup", "live_server", "django_db_reset_sequences",
     "django_db_serialized_rollback", "django_user_model", "admin_user", "admin_client"}
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse the run if any selected test uses the database (named in the error)."""
    using = [
        item.nodeid
        for item in items
        if item.get_closest_marker("django_db")
        or DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
    ]
    if using:
        raise pytest.UsageError(
            "make test-fast uses no database, and these tests do (move them to "
            "tests/integration): " + ", ".join(using)
        )


def _refuse(what: str):
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(_MESSAGE.format(what=what))

    return refused


def pytest_configure(config: pytest.Config) -> None:
    """Libraries that run a helper once per process on first import run it now, before any
    test (matplotlib lists the system fonts with ``fc-list`` when it builds its font cache)."""
    import matplotlib.font_manager  # noqa: F401 - in the test profile


@pytest.fixture(autouse=True)
def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a test could start a process, refused for the test's duration."""
    import multiprocessing.context
    import os

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess.Popen"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    monkeypatch.setattr(
        multiprocessing.context.BaseContext, "Process", _refuse("multiprocessing"), raising=False
    )

"""Shared fixtures: merchants with API keys, API clients, and the sandbox acquirer process.

Nothing imports this module (pytest loads it): what tests import lives in tests/support/.
It also sorts the suite for ``make test`` and ``make test-fast`` (``pytest_collection_modifyitems``
below): the ``subprocess``, ``database`` and ``serial`` markers and the slow tests' timeouts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.servers.basehttp import WSGIRequestHandler
from django.db.backends.postgresql.operations import DatabaseOperations as PostgresOperations
from rest_framework.test import APIClient

from merchants.models import Merchant
from merchants.services import merchant_create
from payments.acquirer.client import acquirer_clients_reset
from tests.support.keys import idempotency_key
from tests.support.redis import suite_redis_url
from tests.support.sandbox import SandboxProcess

#: Tables a transactional test's flush leaves alone: Django's catalogue of content types and
#: permissions, which its ``post_migrate`` handlers write back after every flush, identically
#: (one row per model and permission, as the migrations left them). Emptied, they were
#: rebuilt with a few hundred INSERTs after each such test (0.05-0.07 s of a 0.2 s teardown
#: alone, more beside the suite's other workers); kept, the handlers find every row present.
#: No test writes to them.
FLUSH_KEEPS = frozenset({"django_content_type", "auth_permission"})


def _flush_keeping_the_catalogue(
    self, style, tables, *, reset_sequences=False, allow_cascade=False
):
    """Django's PostgreSQL ``sql_flush`` without :data:`FLUSH_KEEPS`."""
    kept = [table for table in tables if table not in FLUSH_KEEPS]
    return _django_sql_flush(
        self, style, kept, reset_sequences=reset_sequences, allow_cascade=allow_cascade
    )


_django_sql_flush = PostgresOperations.sql_flush
PostgresOperations.sql_flush = _flush_keeping_the_catalogue

#: pytest-django's ``live_server`` (Django's threaded development server) writes an answer's
#: headers and its body in two sends; with Nagle's algorithm on, the body waits for the ACK of
#: the headers, which the client's delayed ACK holds back 40 ms: every request on a kept-alive
#: connection took 40 ms more (Schemathesis' 700 requests: 56 s, 30 of them waiting). The
#: sandbox sets the same (sandbox_acquirer/server.py).
WSGIRequestHandler.disable_nagle_algorithm = True


@dataclass
class MerchantClient:
    """An authenticated API client of one merchant."""

    merchant: Merchant
    api_key: str
    client: APIClient

    def create_payment(self, body: Any, key: str | None = "auto", **headers: str):
        """POST /payments with ``body`` as JSON (a dict) or raw bytes/str; ``key`` None omits it."""
        if key == "auto":
            key = idempotency_key()
        if key is not None:
            headers["HTTP_IDEMPOTENCY_KEY"] = key
        content_type = headers.pop("content_type", "application/json")
        if isinstance(body, (bytes, str)):
            return self.client.generic(
                "POST", "/payments", body, content_type=content_type, **headers
            )
        return self.client.post("/payments", body, format="json", **headers)


def _merchant_client(name: str) -> MerchantClient:
    merchant, issued = merchant_create(name=name)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    return MerchantClient(merchant=merchant, api_key=issued.raw, client=client)


@pytest.fixture
def merchant_a(db) -> MerchantClient:
    return _merchant_client("merchant-a")


@pytest.fixture
def merchant_b(db) -> MerchantClient:
    return _merchant_client("merchant-b")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis of every test that needs one (redis-py URL): ``REDIS_URL`` when set, else the
    embedded server (tests/support/redis.py). Tests use throw-away namespaces and queues."""
    return suite_redis_url()


@pytest.fixture(scope="session")
def sandbox_process() -> Iterator[SandboxProcess]:
    """One sandbox acquirer process for the whole session (real HTTP on loopback)."""
    with SandboxProcess.start() as process:
        yield process


@pytest.fixture(autouse=True)
def fresh_acquirer_state() -> Iterator[None]:
    """Each test starts with new clients: no rate gate or retry budget left by another test."""
    acquirer_clients_reset()
    yield
    acquirer_clients_reset()


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess, settings) -> SandboxProcess:
    """The sandbox, reset, with the service's acquirer settings pointing at it."""
    sandbox_process.reset()
    settings.ACQUIRER_BASE_URL = sandbox_process.url
    settings.ACQUIRER_API_KEY = sandbox_process.api_key
    return sandbox_process


@pytest.fixture
def single_attempt(settings) -> None:
    """The API path makes one attempt per request (no client retries), so an ambiguous first
    answer stays a 202 for the test to see."""
    settings.ACQUIRER_RETRY_MAX_ATTEMPTS = 1


@pytest.fixture
def enqueued(monkeypatch) -> list[str]:
    """Payment ids an operator's action passed to ``payment_reconcile_task.delay`` (replaced
    here, so nothing reaches a broker); each must be marked ``operator_requested``."""
    from payments.reconciliation import tasks

    sent: list[str] = []

    def delay(payment_id: str, *, operator_requested: bool = False) -> None:
        assert operator_requested is True
        sent.append(payment_id)

    monkeypatch.setattr(tasks.payment_reconcile_task, "delay", delay)
    return sent


# -- how make test runs the suite (pytest-xdist, pytest-timeout) -----------------------------

#: Tests that run one after the other on one xdist worker (``--dist loadgroup``: the
#: ``xdist_group("serial")`` marker), while the other workers run the rest: each kills a
#: broker, shares a database or a stack with its neighbours, or measures timing that a
#: machine's other workers would skew. Listed here, by path prefix, not in the files.
SERIAL = (
    "tests/campaigns/",  # one stack per module and one <name>_campaigns database
    "tests/e2e/test_broker_restart.py",  # kills its broker under a live worker, on a deadline
)

#: Modules whose tests share processes started once per module (a module-scoped fixture: a
#: gunicorn stack, localstripe, the Adyen fake, ``make run``). Each runs on one worker (its own
#: ``xdist_group``), beside the others: spread over several workers, each worker started the
#: same stack again (tests/e2e/test_first_hour.py's ``make run`` three times: 20 CPU-seconds).
ONE_WORKER_MODULES = (
    "tests/e2e/test_crash_points.py",
    "tests/e2e/test_first_hour.py",
    "tests/e2e/test_merchant_client_stack.py",
    "tests/integration/test_stripe_connector.py",
    "tests/integration/test_adyen_connector.py",
)

#: Per-test timeouts above the default (``timeout`` in pyproject.toml's [tool.pytest]), in
#: seconds, by path prefix; a test's own ``@pytest.mark.timeout`` wins.
SLOW = {
    "tests/campaigns/": 900,  # the first test starts the whole stack (module fixture)
    # About 60 s with 3 workers busy: Schemathesis' stateful phase, every check, ~400 requests.
    "tests/integration/test_openapi_schemathesis.py": 400,
}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks each test as it is collected: before any ``pytest_collection_modifyitems``, where
    xdist reads the groups (a marker added there can come too late: the group is ignored)."""
    path = item.path.relative_to(item.config.rootpath).as_posix()
    if path.startswith(SERIAL):
        item.add_marker(pytest.mark.xdist_group("serial"))
    elif path in ONE_WORKER_MODULES:
        item.add_marker(pytest.mark.xdist_group(Path(path).stem))
    for prefix, seconds in SLOW.items():
        if path.startswith(prefix) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` on pytest 9.2: pytest-xdist 3.8 names a test's group by setting
    ``item._nodeid`` to ``<nodeid>@<group>``, which pytest 9.2 no longer reads (a node's id is
    ``item._id``), so groups were silently ignored and SERIAL tests ran on several workers at
    once. The same suffix, set where pytest reads it; a no-op once xdist's own takes effect."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers only
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        groups = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if groups and hasattr(item, "_id") and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")


def pytest_report_header(config: pytest.Config) -> str:
    worker = config.getoption("numprocesses", None)
    timeout = config.getini("timeout")
    return (
        f"per-test timeout {timeout} s (longer for tests/conftest.py's SLOW), "
        f"xdist workers: {worker or 'none'}"
    )

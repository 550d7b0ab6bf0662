"""Each pytest-xdist worker of make test has a Redis database of its own (tests/support/redis.py),
and the test helpers stay importable (nothing imports tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.keys import idempotency_key
from tests.support.redis import url_database, worker_redis_url, xdist_worker_index

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("url", "worker", "embedded", "expected"),
    [
        ("redis://cache.internal:6379/8", 0, False, "redis://cache.internal:6379/8"),
        ("redis://cache.internal:6379/8", 3, False, "redis://cache.internal:6379/11"),
        ("redis://cache.internal:6379", 2, False, "redis://cache.internal:6379/2"),
        ("rediss://:pw@cache:6380/3?ssl_cert_reqs=none", 1, False,
         "rediss://:pw@cache:6380/4?ssl_cert_reqs=none"),
        ("unix:///srv/.redis/redis.sock?db=15", 0, True, "unix:///srv/.redis/redis.sock?db=15"),
        ("unix:///srv/.redis/redis.sock?db=15", 2, True, "unix:///srv/.redis/redis.sock?db=13"),
    ],
)  # fmt: skip
def test_each_worker_gets_its_own_database(url, worker, embedded, expected):
    assert worker_redis_url(url, worker, embedded=embedded) == expected
    assert url_database(expected) == url_database(url) + (-worker if embedded else worker)


@pytest.mark.parametrize(
    ("url", "worker", "embedded"),
    [("redis://h/15", 1, False), ("unix:///r.sock?db=15", 14, True)],
)
def test_too_many_workers_fail_naming_the_database(url, worker, embedded):
    """Never a database another user of the server has (0 and 1 are make run's embedded ones)."""
    with pytest.raises(AssertionError, match=f"gw{worker} would use Redis database"):
        worker_redis_url(url, worker, embedded=embedded)


def test_the_worker_index_comes_from_xdist(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert xdist_worker_index() == 0
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert xdist_worker_index() == 3


def test_idempotency_keys_are_unique_and_within_the_api_limits():
    keys = {idempotency_key("acq_") for _ in range(1000)}
    assert len(keys) == 1000
    assert all(re.fullmatch(r"acq_[0-9a-f]{32}", key) for key in keys)


def test_no_test_imports_the_conftest():
    """What tests share is imported from tests/support (a conftest is pytest's to load)."""
    importing = [
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if re.search(r"^\s*(from tests\.conftest import|from tests import conftest|"
                     r"import tests\.conftest)", path.read_text(), re.MULTILINE)
    ]  # fmt: skip
    assert importing == []

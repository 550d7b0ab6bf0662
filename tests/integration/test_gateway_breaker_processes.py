"""
One breaker for the whole fleet: OS processes sharing a real Redis, calling the sandbox
acquirer over HTTP, counted by the sandbox's own stats.

- failures recorded in one process open the breaker for another (Redis TIME, no injection);
- 20 callers in 4 processes at the half-open moment: exactly 3 requests reach the sandbox;
- a probe whose process is killed mid-call frees its permit when its lease ends;
- an operator's forced-open is seen by every process, and its reset too.

Where a test needs "the half-open moment" or "after the lease" exactly, every process reads
one shared test clock from a Redis key (RedisStore's injectable clock), and the test moves it:
no sleeps, no races on real time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway_client import RedisStore
from resilience.breaker import FAILURE, BreakerSet, CircuitBreaker
from tests.lib.test_gateway_breaker_vectors import CONFIG_C
from tests.support.redis import suite_redis_url
from tests.support.sandbox import SandboxProcess

ROOT = Path(__file__).resolve().parents[2]
C_FIELDS = {
    "window_size": 10,
    "minimum_calls": 5,
    "failure_rate_threshold": 50.0,
    "open_duration": 30.0,
    "half_open_permits": 3,
}


# One worker process: builds a client on the shared Redis namespace (and the shared test clock
# when `clock_key` is set), then runs `mode`:
#   calls       `count` authorisations one after the other, then prints their results;
#   concurrent  prints "ready", waits for a line on stdin, then `threads` authorisations at
#               once, and prints their results and the breaker transitions it logged;
#   admits      prints client.admits("authorize").
WORKER = textwrap.dedent(
    """
    import json, logging, sys, threading, uuid
    import redis
    from gateway_client import (AcquirerClient, AcquirerConfig, AuthorizationRequest,
                                BreakerConfig, CircuitOpenError, GatewayError, RedisStore,
                                RetryPolicy)

    spec = json.loads(sys.argv[1])
    transitions = []

    class Transitions(logging.Handler):
        def emit(self, record):
            if hasattr(record, "gateway_breaker_to"):
                transitions.append(record.gateway_breaker_from + "->" + record.gateway_breaker_to)

    breaker_log = logging.getLogger("gateway_client.breaker")
    breaker_log.addHandler(Transitions())
    breaker_log.setLevel(logging.INFO)
    clock = None
    if spec["clock_key"]:
        shared = redis.Redis.from_url(spec["redis_url"])
        clock = lambda: float(shared.get(spec["clock_key"]))
    store = RedisStore.from_url(spec["redis_url"], namespace=spec["namespace"], clock=clock)
    config = BreakerConfig(**spec["breaker"])
    client = AcquirerClient(
        AcquirerConfig(base_url=spec["sandbox_url"], api_key=spec["api_key"], name="sandbox"),
        store=store,
        policy=RetryPolicy(max_attempts=1, deadline=8.0, read_timeout=30.0),
        breakers={"authorize": config, "lookup": config},
    )

    def one():
        reference = "pay_" + uuid.uuid4().hex[:20]
        request = AuthorizationRequest(amount=1000, currency="EUR",
                                       payment_method=spec["token"], payment_reference=reference,
                                       idempotency_key="authorize-" + reference)
        try:
            authorization = client.authorize(request)
            return {"result": "approved" if authorization.approved else "declined"}
        except GatewayError as error:
            return {"result": type(error).__name__, "attempts": error.attempts,
                    "state": getattr(error, "state", None),
                    "retry_after": getattr(error, "retry_after", None)}

    client.admits("authorize")  # connect and load the scripts before the test's moment
    if spec["mode"] == "calls":
        print(json.dumps([one() for _ in range(spec["count"])]), flush=True)
    elif spec["mode"] == "admits":
        print(json.dumps(client.admits("authorize")), flush=True)
    else:
        go = threading.Event()
        results = []
        def caller():
            go.wait()
            results.append(one())
        threads = [threading.Thread(target=caller) for _ in range(spec["threads"])]
        for thread in threads:
            thread.start()
        print("ready", flush=True)
        sys.stdin.readline()
        go.set()
        for thread in threads:
            thread.join()
        print(json.dumps({"results": results, "transitions": transitions}), flush=True)
    """
)


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess) -> SandboxProcess:
    sandbox_process.reset()
    return sandbox_process


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_fleet_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


class SharedClock:
    """The test clock every process reads from one Redis key."""

    def __init__(self, namespace: str, start: float) -> None:
        self.key = f"{namespace}:test_clock"
        self._redis = redis.Redis.from_url(suite_redis_url())
        self.set(start)

    def set(self, seconds: float) -> None:
        self._redis.set(self.key, repr(float(seconds)))

    def __call__(self) -> float:
        return float(self._redis.get(self.key))  # type: ignore[arg-type]


def spawn(
    sandbox: SandboxProcess,
    namespace: str,
    mode: str,
    *,
    token: str = "tok_visa",
    count: int = 1,
    threads: int = 0,
    clock: SharedClock | None = None,
) -> subprocess.Popen[str]:
    spec = {
        "redis_url": suite_redis_url(),
        "namespace": namespace,
        "sandbox_url": sandbox.url,
        "api_key": sandbox.api_key,
        "clock_key": clock.key if clock is not None else None,
        "breaker": C_FIELDS,
        "mode": mode,
        "token": token,
        "count": count,
        "threads": threads,
    }
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(spec)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> Any:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def run(sandbox: SandboxProcess, namespace: str, mode: str, **kwargs: Any) -> Any:
    return finish(spawn(sandbox, namespace, mode, **kwargs))


def acquirer_requests(sandbox: SandboxProcess) -> int:
    """Requests that reached the acquirer API (counted on arrival, before the answer)."""
    return sum(sandbox.stats()["arrivals_per_100ms"].values())


def breaker_on(namespace: str, clock: SharedClock | None = None) -> CircuitBreaker:
    store = RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock)
    return CircuitBreaker(store, "authorize", CONFIG_C, name="sandbox")


def test_failures_in_one_process_open_the_breaker_for_another(
    sandbox: SandboxProcess, namespace: str
) -> None:
    """Process A sees five 503s; process B's calls are then refused without a request."""
    first = run(sandbox, namespace, "calls", token="tok_fail_503_1", count=5)
    assert [call["result"] for call in first] == ["AcquirerUnavailableError"] * 5
    second = run(sandbox, namespace, "calls", token="tok_visa", count=3)
    assert [(call["result"], call["attempts"]) for call in second] == [("CircuitOpenError", 0)] * 3
    assert all(25.0 < call["retry_after"] <= 30.0 for call in second)
    assert acquirer_requests(sandbox) == 5
    assert breaker_on(namespace).snapshot().state == "open"


def test_twenty_callers_in_four_processes_send_exactly_three_probes(
    sandbox: SandboxProcess, namespace: str
) -> None:
    """Half-open moment, 4 processes x 5 threads: 3 requests sent, each transition logged once."""
    clock = SharedClock(namespace, 1000.0)
    breaker = breaker_on(namespace, clock)
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    assert breaker.snapshot().state == "open"
    workers = [
        spawn(sandbox, namespace, "concurrent", token="tok_slow_3000", threads=5, clock=clock)
        for _ in range(4)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    clock.set(1030.0)  # exactly the end of the open period
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    reports = [finish(worker) for worker in workers]
    results = [result for report in reports for result in report["results"]]
    outcomes = sorted(result["result"] for result in results)
    assert outcomes == ["CircuitOpenError"] * 17 + ["approved"] * 3
    refused = [result for result in results if result["result"] == "CircuitOpenError"]
    assert {(result["state"], result["attempts"]) for result in refused} == {("half_open", 0)}
    assert acquirer_requests(sandbox) == 3
    assert breaker.snapshot().state == "closed"
    logged = sorted(line for report in reports for line in report["transitions"])
    assert logged == ["half_open->closed", "open->half_open"]  # once each, fleet-wide


def test_a_killed_probe_frees_its_permit_when_its_lease_ends(
    sandbox: SandboxProcess, namespace: str
) -> None:
    """A probe killed mid-call holds its permit until its lease (8 s deadline + 1 s) ends."""
    clock = SharedClock(namespace, 1000.0)
    breaker = breaker_on(namespace, clock)
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    clock.set(1030.0)
    probe = spawn(sandbox, namespace, "calls", token="tok_slow_20000", clock=clock)
    deadline = time.monotonic() + 20
    while sandbox.stats()["requests_in_flight"] < 1:
        assert time.monotonic() < deadline, "the probe never reached the sandbox"
        time.sleep(0.02)
    os.kill(probe.pid, signal.SIGKILL)
    probe.wait(10)
    assert breaker.snapshot().half_open_permits_in_use == 1
    others = [breaker.acquire(), breaker.acquire()]
    assert all(other.probe for other in others)
    assert breaker.acquire().admitted is False  # the dead probe still holds the third
    clock.set(1038.5)
    assert breaker.acquire().admitted is False
    clock.set(1039.0)
    assert breaker.acquire().probe is True
    assert breaker.snapshot().half_open_permits_in_use == 3


def test_an_operators_forced_open_is_seen_by_every_process(
    sandbox: SandboxProcess, namespace: str
) -> None:
    """force_open here: other processes are refused (pre-check too); after reset, calls pass."""
    breakers = BreakerSet(
        RedisStore.from_url(suite_redis_url(), namespace=namespace),
        {"authorize": CONFIG_C},
        name="sandbox",
    )
    breakers.force_open("authorize", actor="ops", reason="acquirer maintenance")
    for _ in range(2):
        assert run(sandbox, namespace, "admits") == [False, 30.0]
        calls = run(sandbox, namespace, "calls", count=2)
        assert [(call["result"], call["state"]) for call in calls] == [
            ("CircuitOpenError", "forced_open")
        ] * 2
    assert acquirer_requests(sandbox) == 0
    breakers.reset("authorize", actor="ops", reason="maintenance over")
    assert run(sandbox, namespace, "calls") == [{"result": "approved"}]
    assert acquirer_requests(sandbox) == 1

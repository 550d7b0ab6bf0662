"""scripts/demo.py's expectations: derived from the sandbox's scenarios, the number of attempts
the sandbox counted and the gateway client's classifier, mapped to the README's contract."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sandbox_demo_script", ROOT / "scripts/demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("token", "attempts", "expected"),
    [
        ("tok_visa", 1, (201, "succeeded")),
        ("tok_decline", 1, (201, "declined")),
        ("tok_fail_503_2", 1, (503, "failed")),
        ("tok_fail_503_2", 3, (201, "succeeded")),
        ("tok_ratelimit_2", 1, (503, "failed")),
        ("tok_ratelimit_2", 2, (201, "succeeded")),
        ("tok_reset_before_commit", 1, (202, "processing")),
        ("tok_reset_before_commit", 3, (202, "processing")),
        ("tok_reset_after_commit", 1, (202, "processing")),
        ("tok_reset_after_commit", 2, (201, "succeeded")),
        ("tok_timeout_after_commit", 1, (202, "processing")),
        ("tok_timeout_after_commit", 2, (201, "succeeded")),
        ("tok_fail_500_1", 1, (202, "processing")),
        ("tok_fail_400_1", 1, (502, "failed")),
        ("tok_fail_403_1", 1, (502, "failed")),
        ("tok_visa", 0, (503, "failed")),
    ],
)
def test_expectation_follows_the_attempts_the_sandbox_counted(
    demo: ModuleType, token: str, attempts: int, expected: tuple[int, str]
) -> None:
    """One attempt gives today's documented answer; more attempts give the retried one."""
    documented, _why = demo.expected_for(token, attempts, read_timeout=3.0)

    assert documented == expected


def test_an_ambiguous_attempt_makes_a_failed_call_ambiguous(demo: ModuleType) -> None:
    """Two 500s stay ambiguous: the first may have been applied."""
    documented, why = demo.expected_for("tok_fail_500_2", 2, read_timeout=3.0)

    assert documented == (202, "processing")
    assert "UpstreamServerError" in why


def test_a_hang_shorter_than_the_read_timeout_is_a_result(demo: ModuleType) -> None:
    """With a 60 s read timeout, tok_timeout_after_commit's 30 s hang is just slow."""
    documented, _why = demo.expected_for("tok_timeout_after_commit", 1, read_timeout=60.0)

    assert documented == (201, "succeeded")


def test_the_webhook_step_hands_the_api_address_and_key_to_the_webhook_demo(demo, monkeypatch):
    """The last step gets the addresses and key the Demo was built with (it once read
    attributes the Demo no longer has, so make demo crashed after 15 steps)."""
    seen = []

    def webhook_after_reconciliation(api, sandbox, api_key):
        seen.append((api, sandbox, api_key))
        return "webhook after a 202", True, "one event"

    monkeypatch.setattr(demo, "webhook_after_reconciliation", webhook_after_reconciliation)
    run = demo.Demo("http://127.0.0.1:8000/", "http://127.0.0.1:8090/", "sk_test_x", 3.0)
    run.webhook_step()

    assert seen == [("http://127.0.0.1:8000", "http://127.0.0.1:8090", "sk_test_x")]
    assert run.results == [("webhook after a 202", True)]


def test_the_failover_steps_rest_on_the_classifier(demo: ModuleType) -> None:
    """The two-acquirer steps: alpha's 503 before processing is certainly not applied (the
    payment may move to beta), a read timeout is ambiguous (it stays at alpha)."""
    category, why = demo.outcome_category("status", (503, {}, demo.PROBLEMS[503][0]))
    assert category == "not_sent" and "AcquirerUnavailableError" in why

    category, why = demo.outcome_category("exception", demo.httpx.ReadTimeout("timed out"))
    assert category == "ambiguous" and "ResponseTimeoutError" in why


def test_without_a_beta_sandbox_the_failover_steps_count_as_failed_checks(demo, capsys):
    """No beta answering (make run not started with it): both steps are failed checks with a
    hint, sent nothing to alpha, and the demo goes on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    run = demo.Demo(
        "http://127.0.0.1:8000", "http://127.0.0.1:9", "sk_test_x", 3.0,
        beta=f"http://127.0.0.1:{closed}",
    )  # fmt: skip
    run.outage_absorbed()
    run.ambiguous_stays()

    assert [ok for _title, ok in run.results] == [False, False]
    assert "make run starts it" in capsys.readouterr().out

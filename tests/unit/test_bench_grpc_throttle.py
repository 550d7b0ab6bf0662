"""gRPC's retry throttling (gRFC A6), the model the benchmarks compare the retry budget with."""

from __future__ import annotations

from bench.grpc_throttle import GrpcRetryThrottle


def test_grpc_five_failures_from_full_turn_retries_off() -> None:
    """maxTokens 10, tokenRatio 0.1: 5 failures leave 5 tokens and retries are off."""
    throttle = GrpcRetryThrottle(max_tokens=10, token_ratio=0.1)
    assert throttle.retry_allowed() is True
    for _ in range(5):
        throttle.record_failure()
    assert throttle.tokens == 5.0
    assert throttle.retry_allowed() is False


def test_grpc_one_success_turns_retries_back_on() -> None:
    """From 5 tokens, one success makes 5.1 and retries are allowed again."""
    throttle = GrpcRetryThrottle(max_tokens=10, token_ratio=0.1)
    for _ in range(5):
        throttle.record_failure()
    throttle.record_success()
    assert throttle.tokens == 5.1
    assert throttle.retry_allowed() is True


def test_grpc_tokens_stay_within_zero_and_max() -> None:
    """Tokens never go below 0 nor above max_tokens."""
    throttle = GrpcRetryThrottle(max_tokens=2, token_ratio=0.5)
    for _ in range(5):
        throttle.record_failure()
    assert throttle.tokens == 0.0
    for _ in range(10):
        throttle.record_success()
    assert throttle.tokens == 2.0

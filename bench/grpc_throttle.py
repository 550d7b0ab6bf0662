"""
gRPC's client retry throttling (gRFC A6), one process: a model to compare the retry budget with.

Tokens start at `max_tokens`, each failure takes 1, each success gives `token_ratio`, and
retries are allowed only while tokens > max_tokens / 2. The acquirer client does not use it:
its retry budget (gateway_client/budget.py) is Finagle's, shared by every process.
"""

from __future__ import annotations

import threading

__all__ = ["GrpcRetryThrottle"]

_SCALE = 1000  # thousandths of a token, as gRPC keeps them


class GrpcRetryThrottle:
    """
    gRPC client retry throttling (gRFC A6), one process.

    Tokens start at `max_tokens`; `record_failure()` subtracts 1 (not below 0),
    `record_success()` adds `token_ratio` (not above max_tokens); `retry_allowed()` is True
    while tokens > max_tokens / 2. Kept in thousandths, as gRPC does, so 5 + 0.1 is exact.
    """

    def __init__(self, max_tokens: int = 10, token_ratio: float = 0.1) -> None:
        if max_tokens <= 0 or token_ratio <= 0:
            raise ValueError("max_tokens and token_ratio must be positive")
        self._max = max_tokens * _SCALE
        self._ratio = round(token_ratio * _SCALE)
        self._tokens = self._max
        self._lock = threading.Lock()

    @property
    def tokens(self) -> float:
        """The current token count."""
        with self._lock:
            return self._tokens / _SCALE

    def record_failure(self) -> None:
        """A failed attempt (a retryable status): one token less."""
        with self._lock:
            self._tokens = max(0, self._tokens - _SCALE)

    def record_success(self) -> None:
        """A successful attempt: token_ratio more."""
        with self._lock:
            self._tokens = min(self._max, self._tokens + self._ratio)

    def retry_allowed(self) -> bool:
        """True while tokens > max_tokens / 2."""
        with self._lock:
            return self._tokens * 2 > self._max

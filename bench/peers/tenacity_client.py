"""A peer acquirer client: httpx + tenacity + pybreaker, with their documented settings.

What a team would assemble from the usual libraries instead of ``gateway_client``:

* **httpx**: ``httpx.Client()`` with its default timeout (5 s) and pool;
* **tenacity**: ``stop_after_attempt(3)`` (the same attempt count as ``gateway_client``'s
  default policy, so the comparison isolates everything else) and
  ``wait_random_exponential(multiplier=1, max=60)``, the README's recommendation for
  distributed services (full jitter: uniform(0, 2^n) s); retried: transport errors and 429, 500,
  502, 503, 504 answers; ``reraise=True``;
* **pybreaker**: ``CircuitBreaker(fail_max=5, reset_timeout=60)``, the README's example, around
  each attempt (so an open breaker refuses without sending, and tenacity does not retry that).

Every attempt carries the caller's acquirer idempotency key, as ``gateway_client`` does, so both
are equally safe to retry; the comparison is about load and speed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pybreaker
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class TransientStatusError(Exception):
    """The acquirer answered a status worth retrying."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


@dataclass(frozen=True)
class PeerAuthorization:
    acquirer_reference: str
    approved: bool


class PeerClient:
    """``authorize(amount, currency, payment_method, reference, idempotency_key)``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        breaker: pybreaker.CircuitBreaker | None = None,
        use_breaker: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        )
        self.breaker = (
            (breaker or pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60))
            if use_breaker
            else None
        )
        self._retrying = retry(
            stop=stop_after_attempt(3),
            wait=wait_random_exponential(multiplier=1, max=60),
            retry=retry_if_exception_type((httpx.TransportError, TransientStatusError)),
            reraise=True,
        )(self._attempt)

    def authorize(self, **request: Any) -> PeerAuthorization:
        return self._retrying(request)

    def _attempt(self, request: dict[str, Any]) -> PeerAuthorization:
        if self.breaker is None:
            return self._send(request)
        return self.breaker.call(self._send, request)

    def _send(self, request: dict[str, Any]) -> PeerAuthorization:
        body = {k: request[k] for k in ("amount", "currency", "payment_method", "reference")}
        response = self.http.post(
            "/charges",
            content=json.dumps(body),
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": request["idempotency_key"],
            },
        )
        if response.status_code in RETRIED_STATUSES:
            raise TransientStatusError(response.status_code)
        response.raise_for_status()
        charge = response.json()
        return PeerAuthorization(charge["id"], charge["status"] == "approved")

    def close(self) -> None:
        self.http.close()

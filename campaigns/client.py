"""A merchant's HTTP client for the campaigns (httpx, asyncio): every answer kept as data."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Answer:
    """One HTTP exchange: ``status`` None when no answer came (``error`` says why)."""

    status: int | None
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    @property
    def replayed(self) -> bool:
        return self.headers.get("idempotent-replayed") == "true"

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def payment_id(self) -> str | None:
        data = self.json()
        if isinstance(data, dict):
            return data.get("id") or data.get("payment_id")
        return None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()


class ApiClient:
    """One merchant's client of the payment API (``api_key`` in memory only)."""

    def __init__(
        self, base_url: str, api_key: str, *, max_connections: int = 200, timeout: float = 30.0
    ) -> None:
        self.base_url = base_url
        self._api_key = api_key
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=False,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        **kwargs: Any,
    ) -> Answer:
        all_headers = dict(headers or {})
        if auth:
            all_headers.setdefault("Authorization", f"Bearer {self._api_key}")
        started = time.monotonic()
        try:
            response = await self._http.request(method, path, headers=all_headers, **kwargs)
        except httpx.HTTPError as exc:
            return Answer(status=None, error=type(exc).__name__, seconds=time.monotonic() - started)
        return Answer(
            status=response.status_code,
            body=response.content,
            headers={k.lower(): v for k, v in response.headers.items()},
            seconds=time.monotonic() - started,
        )

    async def create(self, key: str, body: dict[str, Any], **kwargs: Any) -> Answer:
        """``POST /payments`` with ``Idempotency-Key: key``."""
        return await self.request(
            "POST", "/payments", json=body, headers={"Idempotency-Key": key}, **kwargs
        )

    async def close(self) -> None:
        await self._http.aclose()

"""
How the client turns a dialect's `WireRequest` into the httpx request of each attempt: the
shared headers, the caller's request id (`X-Request-Id`), the attempt's timeouts; and the
check of a look-up's reference. The same bytes go out on every attempt of a call.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from ._call import Progress
from .dialect import WireRequest
from .wire import REQUEST_ID_HEADER

__all__ = ["check_reference", "request_builder", "request_id_headers"]


def request_builder(
    base_url: str, wire: WireRequest, headers: dict[str, str], progress: Progress
) -> Callable[[httpx.Timeout], httpx.Request]:
    """Builds `wire` (relative to `base_url`) with `headers` and the call's request id as an
    httpx request for one attempt's timeouts (the same bytes on every attempt)."""
    headers = headers | request_id_headers(progress)
    if wire.content_type is not None:
        headers["Content-Type"] = wire.content_type
    url = base_url + wire.path
    params = wire.params or None

    def build(timeout: httpx.Timeout) -> httpx.Request:
        return httpx.Request(
            wire.method,
            url,
            params=params,
            content=wire.body,
            headers=headers,
            extensions={"timeout": timeout.as_dict()},
        )

    return build


def check_reference(parameter: str, reference: object) -> None:
    """A look-up's reference: a non-empty string, else ValueError naming `parameter`."""
    if not isinstance(reference, str) or not reference:
        raise ValueError(f"{parameter} must be a non-empty string")


def request_id_headers(progress: Progress) -> dict[str, str]:
    """The `X-Request-Id` header of a call that carries a request id, else none."""
    return {} if progress.request_id is None else {REQUEST_ID_HEADER: progress.request_id}

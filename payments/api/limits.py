"""Per-merchant limits: a request rate and a cap on in-flight payments (ADR 0018).

Both live in the acquirer state store (``ACQUIRER_STATE_REDIS_URL``, the same Redis and
namespace as the rate gate, retry budget and breakers), so every gunicorn worker counts the same
requests; without Redis, or while it is unreachable, each process counts its own (the store's
in-memory fallback, logged by ``gateway_client.store``). Each operation is one of the
resilience kit's atomic scripts, :data:`~resilience.RATE_SCRIPT` and
:data:`~resilience.SLOTS_SCRIPT` (``resilience/limits.py``: a Lua program in
``resilience/lua/`` and its Python twin, ADR 0005), keyed here by merchant;
``tests/integration/test_merchant_limits_redis.py`` runs both on the same sequences.

* **Request rate** (:func:`request_rate_check`): ``quota`` requests per ``window`` seconds per
  merchant, a fixed window shifted by the merchant id modulo the window. Every authenticated
  API request counts, replays included (a replay costs a database read, and a client's retry
  loop of replays is what the limit is for); a refused request does not count, whichever
  limit refused it (a payment POST refused by the in-flight cap below gives its count back,
  :func:`request_rate_refund`: a client honouring that ``Retry-After`` keeps its rate).
  Refused: ``429 rate_limited`` with ``Retry-After``. Every counted answer carries the IETF
  ``RateLimit-Policy`` and ``RateLimit`` fields (draft-ietf-httpapi-ratelimit-headers-10, the
  form ``resilience.quota_profile`` reads): ``"merchant";q=<quota>;w=<window>`` and
  ``"merchant";r=<remaining>;t=<seconds to the window's end>``; ``t`` and ``Retry-After`` are
  rounded up to whole seconds, never down, and ``r`` is exact.
* **In-flight payments** (:func:`payment_slot`): ``POST /payments`` and the capture, void and
  refund POSTs (the calls that may wait on the acquirer for its 8 s deadline) hold one of the
  merchant's slots while they run. The slot is a lease: released on every exit (a ``with``
  block), and expiring after ``lease`` seconds if the process dies holding it. Refused: ``429
  concurrency_limited``, ``Retry-After: 1``.

* **Failed authentications per client** (:func:`authentication_failures_refusal`): a client
  (its address, an IPv6 one by its /64) that sent ``API_AUTH_FAILURE_LIMIT`` requests with a
  missing, malformed, unknown or revoked key in ``API_AUTH_FAILURE_WINDOW_SECONDS`` is answered
  ``429 authentication_rate_limited`` with ``Retry-After`` until the window ends, before any
  key look-up: a flood of guessed keys costs one Redis round trip each, no query. A key this
  process already trusts (its cache) still passes, so a merchant sharing an address with the
  flood keeps working; a key not cached waits for the window like the rest.

Both merchant checks run before the idempotency key is claimed: a refused request stores
nothing, and its retry with the same key is a new request (a replay of a completed payment
too: at the cap, it waits for a slot like any other POST).

``0`` (the setting or the merchant's field) means no limit.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from merchants.models import Merchant
from payments.acquirer.client import shared_state_store
from payments.api.problems import Problem
from resilience import RATE_SCRIPT, SLOTS_SCRIPT

__all__ = [
    "POLICY_NAME",
    "RATE_SCRIPT",
    "SLOTS_SCRIPT",
    "ConcurrencyLimited",
    "RateDecision",
    "authentication_failures_refusal",
    "authentication_window_offset",
    "client_address",
    "concurrency_limit",
    "payment_slot",
    "rate_limit",
    "request_rate_check",
    "request_rate_refund",
    "request_rate_window_offset",
]

#: The quota policy's name in ``RateLimit-Policy`` and ``RateLimit`` (a structured String).
POLICY_NAME = "merchant"


def rate_limit(merchant: Merchant) -> int:
    """The merchant's requests per window: its own ``rate_limit_requests``, else
    ``MERCHANT_RATE_LIMIT_REQUESTS``; 0 is no limit."""
    own = merchant.rate_limit_requests
    return settings.MERCHANT_RATE_LIMIT_REQUESTS if own is None else own


def concurrency_limit(merchant: Merchant) -> int:
    """The merchant's in-flight payments: its own ``concurrent_payments_limit``, else
    ``MERCHANT_CONCURRENT_PAYMENTS``; 0 is no limit."""
    own = merchant.concurrent_payments_limit
    return settings.MERCHANT_CONCURRENT_PAYMENTS if own is None else own


@dataclass(frozen=True, slots=True)
class RateDecision:
    """One counted request: ``quota`` requests per ``window`` seconds, ``remaining`` after
    this one, ``reset`` seconds (float) until the window ends; ``counted_in``: the number of
    the window that counted it (None: not counted), for :func:`request_rate_refund`."""

    allowed: bool
    quota: int
    window: int
    remaining: int
    reset: float
    counted_in: int | None = None

    def headers(self) -> dict[str, str]:
        """``RateLimit-Policy`` and ``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-10,
        RFC 8941 Lists); ``t`` rounded up to whole seconds, at least 1."""
        reset = max(1, math.ceil(self.reset))
        return {
            "RateLimit-Policy": f'"{POLICY_NAME}";q={self.quota};w={self.window}',
            "RateLimit": f'"{POLICY_NAME}";r={self.remaining};t={reset}',
        }


def request_rate_window_offset(merchant_id: int, window: int) -> int:
    """Where a merchant's request-rate windows start, in seconds (0 to ``window - 1``): its
    windows are ``[offset + k * window, offset + (k + 1) * window)`` of Unix time and its count
    starts again at each one's start; the merchant's id spreads the merchants' window ends."""
    return merchant_id % window


def request_rate_check(merchant: Merchant) -> RateDecision | None:
    """Count one request of ``merchant``; None when it has no rate limit.

    Returns the decision (allowed or not; the caller answers a refusal with
    :func:`rate_limited`). Never raises for a store outage (the in-memory fallback counts).
    """
    quota = rate_limit(merchant)
    if quota <= 0:
        return None
    window = settings.MERCHANT_RATE_LIMIT_WINDOW_SECONDS
    allowed, remaining, reset, index = shared_state_store().run(
        RATE_SCRIPT,
        [f"merchant_rate:{merchant.pk}"],
        [quota, window, request_rate_window_offset(merchant.pk, window)],
    )
    counted_in = int(index) if allowed else None
    return RateDecision(bool(allowed), quota, window, max(0, int(remaining)), reset, counted_in)


def request_rate_refund(merchant: Merchant, decision: RateDecision) -> RateDecision:
    """Give back the count of a request of ``merchant`` that ``decision`` allowed and another
    limit then refused (the in-flight cap: :class:`ConcurrencyLimited`), while the window that
    counted it lasts. Returns the decision to answer with: ``remaining`` after the refund, the
    request no longer counted; ``decision`` itself when there is nothing to give back (not
    counted, or its window has ended). Never raises for a store outage."""
    if decision.counted_in is None:
        return decision
    given_back, remaining, reset, _ = shared_state_store().run(
        RATE_SCRIPT,
        [f"merchant_rate:{merchant.pk}"],
        [
            decision.quota,
            decision.window,
            request_rate_window_offset(merchant.pk, decision.window),
            "refund",
            decision.counted_in,
        ],
    )
    if not given_back:
        return decision
    return RateDecision(True, decision.quota, decision.window, max(0, int(remaining)), reset)


def rate_limited(decision: RateDecision) -> Problem:
    """The ``429 rate_limited`` problem of a refused request; ``Retry-After`` is the time to
    the window's end, rounded up."""
    return Problem(
        f"More than {decision.quota} requests in {decision.window} s; retry after the "
        "Retry-After seconds.",
        code="rate_limited",
        title="Too many requests",
        status_code=429,
        retry_after=max(1, math.ceil(decision.reset)),
    )


class ConcurrencyLimited(Problem):
    """``429 concurrency_limited``: the merchant's in-flight payment slots are all taken."""


@contextmanager
def payment_slot(merchant: Merchant) -> Iterator[None]:
    """Hold one of ``merchant``'s in-flight payment slots for the ``with`` block.

    Raises :class:`ConcurrencyLimited` ``429 concurrency_limited`` (``Retry-After``:
    ``MERCHANT_CONCURRENCY_RETRY_AFTER_SECONDS``) when all are taken; the slot is released when
    the block ends, by an answer or an exception, and expires after
    ``MERCHANT_PAYMENT_LEASE_SECONDS`` if the process dies first.
    """
    limit = concurrency_limit(merchant)
    if limit <= 0:
        yield
        return
    store, key, lease_id = shared_state_store(), [f"merchant_slots:{merchant.pk}"], uuid.uuid4().hex
    granted, _ = store.run(
        SLOTS_SCRIPT, key, ["acquire", lease_id, limit, settings.MERCHANT_PAYMENT_LEASE_SECONDS]
    )
    if not granted:
        raise ConcurrencyLimited(
            f"{limit} payment requests of this merchant are already in progress; retry after "
            "the Retry-After seconds.",
            code="concurrency_limited",
            title="Too many payment requests in progress",
            status_code=429,
            retry_after=settings.MERCHANT_CONCURRENCY_RETRY_AFTER_SECONDS,
        )
    try:
        yield
    finally:
        store.run(SLOTS_SCRIPT, key, ["release", lease_id])


def client_address(request) -> str:
    """The client's address for the per-client limits: ``REMOTE_ADDR``, or the last address
    of the header ``API_CLIENT_ADDRESS_HEADER`` when set (the proxy's ``X-Forwarded-For``,
    deploy/nginx: set it only where clients cannot reach gunicorn but through the proxy). An
    IPv6 address is taken by its /64 (one host's share); anything unparsable is ``unknown``."""
    raw = request.META.get("REMOTE_ADDR", "")
    header = settings.API_CLIENT_ADDRESS_HEADER
    if header:
        forwarded = request.headers.get(header, "")
        raw = forwarded.rsplit(",", 1)[-1].strip() or raw
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return "unknown"
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def authentication_window_offset(client: str, window: int) -> int:
    """Where ``client``'s windows of failed authentications start, in seconds (0 to
    ``window - 1``): its windows are ``[offset + k * window, offset + (k + 1) * window)`` of
    Unix time, and its count starts again at each one's start. A hash of the client (CRC-32)
    spreads the clients' window ends over the window."""
    return zlib.crc32(client.encode()) % window


def authentication_failures_refusal(client: str, *, count: bool) -> Problem | None:
    """The ``429 authentication_rate_limited`` problem when ``client`` (a
    :func:`client_address`) has failed to authenticate ``API_AUTH_FAILURE_LIMIT`` times in the
    current window of ``API_AUTH_FAILURE_WINDOW_SECONDS``, else None; None too when the limit
    is 0 (off).

    ``count=False`` only reads: :data:`RATE_SCRIPT` with a quota of 0 refuses, and a refused
    request is not counted, so it answers ``-failures`` as its remaining. ``count=True``
    counts one failure, and refuses it when it is one too many. Never raises for a store
    outage (the in-memory fallback counts per process)."""
    quota = settings.API_AUTH_FAILURE_LIMIT
    if quota <= 0:
        return None
    window = settings.API_AUTH_FAILURE_WINDOW_SECONDS
    allowed, remaining, reset, _ = shared_state_store().run(
        RATE_SCRIPT,
        [f"auth_failures:{client}"],
        [quota if count else 0, window, authentication_window_offset(client, window)],
    )
    over = not allowed if count else -remaining >= quota
    if not over:
        return None
    return Problem(
        f"More than {quota} requests with a missing or invalid API key from this address in "
        f"{window} s; retry after the Retry-After seconds.",
        code="authentication_rate_limited",
        title="Too many failed authentications",
        status_code=429,
        retry_after=max(1, math.ceil(reset)),
    )

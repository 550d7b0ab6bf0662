"""
`MerchantClient`: the payment API's operations, each retried within one call as the API asks.

    client = MerchantClient("https://payments.example", api_key)
    result = client.create_payment(1999, "EUR", "tok_visa", reference="order-1",
                                   persist_key=lambda key: job.save(idempotency_key=key))
    if isinstance(result, Pending):
        result = client.wait_until_final(result, timeout=60)

Every mutating call (create, capture, void, refund) sends one idempotency key on every
attempt: the caller's (`idempotency_key=`, one per logical operation, kept by the caller
across restarts), or a new one handed to `persist_key(key)` *before* the first request is
sent, so that a job that dies and runs again re-sends the same key (and gets the first
answer replayed instead of a second payment). One of the two is required.

Retries follow `merchant_client.retry` (the table there): connection failures and resets,
`409 idempotency_key_in_use`, `429` and `503` after `Retry-After` while the deadline allows,
other `5xx` with the same key; never a `400`, `401`, `404`, `409` conflict or `422`. The
deadline bounds the whole call (sleeps and sockets: `resilience.attempt_deadline`). Time, sleep
and the jitter's random numbers are injected (`clock`, `sleep`, `random`).

Results: `Payment` / `Refund` when final, `Pending` for a `202`; errors: `merchant_client.errors`.
Never logged or put in a message: the API key, headers, bodies, card tokens.
"""

from __future__ import annotations

import contextlib
import json
import random as _random
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from gateway_client import (
    ConnectionFailedError,
    InvalidRequestError,
    RetryPolicy,
    classify_exception,
)
from resilience import Clock, SystemClock, attempt_deadline, full_jitter, install_deadline

from .errors import ConnectionFailed, MerchantApiError, OutcomeUnknown, error_class
from .retry import AMBIGUOUS, DEFAULT_POLICY, NOT_SENT, Outcome, decide, server_wait
from .types import (
    ActionRequired,
    DecodeError,
    Page,
    Payment,
    Pending,
    Refund,
    action_required,
    decode_payment,
    decode_refund,
)

__all__ = ["MerchantClient"]

R = TypeVar("R")
T = TypeVar("T", Payment, Refund)

#: The API's replay header (idempotency/responses.py) and its request id header.
REPLAYED_HEADER = "idempotent-replayed"
REQUEST_ID_HEADER = "request-id"

# An Idempotency-Key: 1-255 characters of %x21-7E (docs/api.md, "Idempotency contract").
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
# Characters a bare key cannot carry: a comma reads as two fields (RFC 9110 section 5.3), a
# leading quote as an RFC 8941 string; such a key is sent as that string.
_NEEDS_QUOTING = re.compile(r'[,"\\]')


def _idempotency_key_field(key: str) -> str:
    """The ``Idempotency-Key`` field value for ``key`` (1-255 characters of %x21-7E): the key
    itself, or, when it holds ``,``, ``"`` or ``\\``, an RFC 8941 sf-string (section 3.3.3:
    quoted, ``"`` and ``\\`` escaped), which the API reads back as the same key."""
    if not _NEEDS_QUOTING.search(key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: Waits of `wait_until_final` above the API's Retry-After: full jitter with these bounds.
POLL_BASE, POLL_CAP = 1.0, 30.0


class MerchantClient:
    """
    A client of the payment API for one merchant (one API key); thread-safe (one httpx
    connection pool). Use it as a context manager, or call `close()`.

    Args:
        base_url: the API's root, e.g. `https://payments.example`.
        api_key: the merchant's API key (sent as `Authorization: Bearer`; never logged).
        policy: the default `gateway_client.RetryPolicy` of every call
            (`merchant_client.retry.DEFAULT_POLICY`: 3 attempts, 30 s); each call takes
            `policy=` too.
        clock: `monotonic()` for the deadline, `time()` for HTTP-dates and `not_before`
            (`resilience.ManualClock` in tests); default the system's.
        sleep: called with the seconds to wait; default `time.sleep`.
        random: a float in [0, 1) for the jitter; default a private `random.Random`.
        transport: an httpx transport (default `httpx.HTTPTransport()`); an `HTTPTransport`
            gets the deadline-aware sockets of `resilience.install_deadline`.
        new_key: makes an idempotency key when the caller gives none (default a UUID4).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        policy: RetryPolicy = DEFAULT_POLICY,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        random: Callable[[], float] | None = None,
        transport: httpx.BaseTransport | None = None,
        new_key: Callable[[], str] | None = None,
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a gateway_client.RetryPolicy")
        self._policy = policy
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._sleep = sleep if sleep is not None else time.sleep
        self._random = random if random is not None else _random.Random().random  # noqa: S311
        self._new_key = new_key if new_key is not None else lambda: str(uuid.uuid4())
        transport = transport if transport is not None else httpx.HTTPTransport()
        self._deadline_sockets = isinstance(transport, httpx.HTTPTransport) and install_deadline(
            transport
        )
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            transport=transport,
            trust_env=False,
            follow_redirects=False,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> MerchantClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MerchantClient({str(self._http.base_url)!r})"

    # -- payments --------------------------------------------------------------------------

    def create_payment(
        self,
        amount: int,
        currency: str,
        payment_method: str,
        *,
        reference: str | None = None,
        description: str | None = None,
        capture_method: str | None = None,
        allow_deferred: bool = False,
        return_url: str | None = None,
        idempotency_key: str | None = None,
        persist_key: Callable[[str], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> Payment | Pending[Payment] | ActionRequired:
        """
        `POST /payments`: authorize (and, by default, capture) `amount` minor units of
        `currency` (ISO 4217) with the token `payment_method` (`tok_...`).

        Returns the final `Payment` (201: `succeeded`, `requires_capture` with
        `capture_method="manual"`, or `declined`: a decline is a result) or `Pending` (202,
        `processing`; or `deferred` with `allow_deferred=True`, for payments nobody waits for
        such as renewals: no acquirer could take it now, the API sends it at its `not_before`
        or later, and the same key answers its current state). With `return_url` (your
        https page for the shopper's return), a payment the acquirer holds for the shopper
        (3-D Secure) is `ActionRequired`: send the shopper to its `url`; without it, such a
        payment is declined `shopper_action_required`. Raises the
        `merchant_client.errors` tree: `ServiceUnavailable` (nothing charged; come back after
        `retry_after` with the same key), `AcquirerError`, `ValidationError`,
        `CardDataNotAccepted`, `IdempotencyKeyReused`, ...; `TypeError` when neither
        `idempotency_key` nor `persist_key` is given, `ValueError` for a key that is not 1-255
        characters of `%x21-7E`.
        """
        body: dict[str, Any] = {
            "amount": amount,
            "currency": currency,
            "payment_method": payment_method,
        }
        optional = {
            "reference": reference,
            "description": description,
            "capture_method": capture_method,
            "allow_deferred": True if allow_deferred else None,  # false: left out, as before
            "return_url": return_url,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        key = self._key(idempotency_key, persist_key)
        result = self._mutate("/payments", body, key, decode_payment, policy)
        return action_required(result) if isinstance(result, Payment) else result

    def capture(
        self,
        payment_id: str,
        *,
        amount: int | None = None,
        idempotency_key: str | None = None,
        persist_key: Callable[[str], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> Payment | Pending[Payment]:
        """
        `POST /payments/{id}/capture`: capture a `requires_capture` payment, all of it or
        `amount` minor units (the rest is released). Returns the `Payment` (`succeeded`) or
        `Pending` (`capture_pending`). Raises `InvalidPaymentState`,
        `AmountExceedsCapturable`, `NotFound`, and the errors of `create_payment`.
        """
        body = {} if amount is None else {"amount": amount}
        key = self._key(idempotency_key, persist_key)
        path = f"/payments/{_segment(payment_id)}/capture"
        return self._mutate(path, body, key, decode_payment, policy)

    def void(
        self,
        payment_id: str,
        *,
        idempotency_key: str | None = None,
        persist_key: Callable[[str], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> Payment | Pending[Payment]:
        """
        `POST /payments/{id}/void`: release a `requires_capture` payment. Returns the
        `Payment` (`canceled`) or `Pending` (`void_pending`). Raises `InvalidPaymentState`,
        `NotFound`, and the errors of `create_payment`.
        """
        key = self._key(idempotency_key, persist_key)
        path = f"/payments/{_segment(payment_id)}/void"
        return self._mutate(path, {}, key, decode_payment, policy)

    def refund(
        self,
        payment_id: str,
        *,
        amount: int | None = None,
        reason: str | None = None,
        idempotency_key: str | None = None,
        persist_key: Callable[[str], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> Refund | Pending[Refund]:
        """
        `POST /payments/{id}/refunds`: refund `amount` minor units (default: all that
        remains) of a `succeeded` payment; `reason` one of `requested_by_customer`,
        `duplicate`, `fraudulent`. Returns the `Refund` (`succeeded`, or `failed` when the
        acquirer declined it: a result) or `Pending` (`pending`). Raises
        `InvalidPaymentState`, `AmountExceedsRefundable`, `NotFound`, and the errors of
        `create_payment`.
        """
        body: dict[str, Any] = {}
        if amount is not None:
            body["amount"] = amount
        if reason is not None:
            body["reason"] = reason
        key = self._key(idempotency_key, persist_key)
        path = f"/payments/{_segment(payment_id)}/refunds"
        return self._mutate(path, body, key, decode_refund, policy)

    def get_payment(self, payment_id: str, *, policy: RetryPolicy | None = None) -> Payment:
        """`GET /payments/{id}`. Raises `NotFound` (unknown or another merchant's)."""
        return self._read(f"/payments/{_segment(payment_id)}", None, policy, decode_payment)

    def list_payments(
        self,
        *,
        status: str | None = None,
        reference: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        policy: RetryPolicy | None = None,
    ) -> Page[Payment]:
        """`GET /payments`: one page, newest first (`limit` 1-100; `starting_after` the last
        id of the previous page). Raises `ValidationError` for a bad filter."""
        params = _params(
            status=status, reference=reference, limit=limit, starting_after=starting_after
        )
        return self._read_page("/payments", params, policy, decode_payment)

    def get_refund(self, refund_id: str, *, policy: RetryPolicy | None = None) -> Refund:
        """`GET /refunds/{id}`. Raises `NotFound`."""
        return self._read(f"/refunds/{_segment(refund_id)}", None, policy, decode_refund)

    def list_refunds(
        self,
        payment_id: str,
        *,
        limit: int | None = None,
        starting_after: str | None = None,
        policy: RetryPolicy | None = None,
    ) -> Page[Refund]:
        """`GET /payments/{id}/refunds`: one page of the payment's refunds, newest first."""
        params = _params(limit=limit, starting_after=starting_after)
        path = f"/payments/{_segment(payment_id)}/refunds"
        return self._read_page(path, params, policy, decode_refund)

    def wait_until_final(
        self, target: str | Pending[Any], timeout: float, *, policy: RetryPolicy | None = None
    ) -> Any:
        """
        Poll `GET /payments/{id}` (or `GET /refunds/{id}` for a `re_...` id) until the object
        is final, for at most `timeout` seconds; returns the final `Payment` / `Refund`, or a
        `Pending` with the latest object when the timeout comes first.

        `target`: a `Pending` (its `retry_after` is waited before the first look and is the
        floor of every wait) or an id (looked at at once). Each wait is that floor plus full
        jitter `uniform(0, min(30, 1 * 2**n))`; a wait that would end after the timeout is not
        slept. Each GET retries as usual within the time left. Raises the GETs' errors.
        """
        started = self._clock.monotonic()
        floor = target.retry_after if isinstance(target, Pending) else None
        object_id = target.id if isinstance(target, Pending) else target
        read: Callable[..., Any] = (
            self.get_refund if object_id.startswith("re_") else self.get_payment
        )
        chosen = policy or self._policy
        polls = 0
        current: Any = target.object if isinstance(target, Pending) else None
        while True:
            if current is not None:
                wait = (floor or 0.0) + full_jitter(polls, POLL_BASE, POLL_CAP, self._random)
                left = timeout - (self._clock.monotonic() - started)
                if wait >= left:
                    return Pending(current, floor, request_id=current.request_id)
                self._sleep(wait)
                polls += 1
            left = timeout - (self._clock.monotonic() - started)
            # Each look gets the time left, but at least a second: a timeout of 0 looks once.
            within = chosen.replace(deadline=max(1.0, min(chosen.deadline, left)))
            current = read(object_id, policy=within)
            if current.final:
                return current

    # -- the call --------------------------------------------------------------------------

    def _key(self, idempotency_key: str | None, persist_key: Callable[[str], None] | None) -> str:
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not _KEY.fullmatch(idempotency_key):
                raise ValueError("idempotency_key must be 1-255 characters of %x21-7E")
            return idempotency_key
        if persist_key is None:
            raise TypeError(
                "pass idempotency_key= (the key of this logical operation) or persist_key= "
                "(a callback that stores the generated key before it is sent)"
            )
        key = self._new_key()
        persist_key(key)  # raises: nothing is sent
        return key

    def _mutate(
        self,
        path: str,
        body: dict[str, Any],
        key: str,
        decode: Callable[..., T],
        policy: RetryPolicy | None,
    ) -> T | Pending[T]:
        def result(response: httpx.Response, meta: dict[str, Any]) -> T | Pending[T]:
            value = decode(_json(response), **meta)
            if response.status_code == 202:
                retry_after = _retry_after(response, self._clock)
                return Pending(
                    value,
                    retry_after,
                    replayed=meta["replayed"],
                    request_id=meta["request_id"],
                    attempts=meta["attempts"],
                )
            return value

        content = json.dumps(body, separators=(",", ":")).encode()
        headers = {
            "Idempotency-Key": _idempotency_key_field(key),
            "Content-Type": "application/json",
        }
        return self._call("POST", path, None, content, headers, key, policy, result)

    def _read(
        self,
        path: str,
        params: dict[str, str] | None,
        policy: RetryPolicy | None,
        decode: Callable[..., T],
    ) -> T:
        def result(response: httpx.Response, meta: dict[str, Any]) -> T:
            return decode(_json(response), **meta)

        return self._call("GET", path, params, None, {}, None, policy, result)

    def _read_page(
        self,
        path: str,
        params: dict[str, str],
        policy: RetryPolicy | None,
        decode: Callable[..., T],
    ) -> Page[T]:
        def result(response: httpx.Response, meta: dict[str, Any]) -> Page[T]:
            document = _json(response)
            if not isinstance(document, dict) or document.get("object") != "list":
                raise DecodeError("not a list object")
            items, has_more = document.get("data"), document.get("has_more")
            if not isinstance(items, list) or not isinstance(has_more, bool):
                raise DecodeError("field 'data' or 'has_more' is not of the documented type")
            decoded = tuple(decode(item, request_id=meta["request_id"]) for item in items)
            return Page(decoded, has_more, request_id=meta["request_id"])

        return self._call("GET", path, params, None, {}, None, policy, result)

    def _call(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        content: bytes | None,
        headers: dict[str, str],
        key: str | None,
        policy: RetryPolicy | None,
        result: Callable[[httpx.Response, dict[str, Any]], R],
    ) -> R:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a gateway_client.RetryPolicy")
        chosen = policy or self._policy
        started = self._clock.monotonic()
        deadline = started + chosen.deadline
        attempts = 0
        ambiguous = False  # an earlier attempt may have been applied
        while True:
            attempts += 1
            error: MerchantApiError
            try:
                response = self._send(method, path, params, content, headers, deadline, chosen)
            except httpx.HTTPError as exc:
                transport = _transport_kind(exc)
                if transport is None:  # httpx cannot express the request: a bug, not retried
                    raise ConnectionFailed(
                        f"{method} {path}: the request could not be sent ({type(exc).__name__})",
                        attempts=attempts - 1,
                        idempotency_key=key,
                    ) from exc
                ambiguous = ambiguous or transport == AMBIGUOUS
                outcome = Outcome(transport=transport)
                error_type = OutcomeUnknown if ambiguous else ConnectionFailed
                error = error_type(
                    f"{method} {path}: no answer ({type(exc).__name__})",
                    attempts=attempts,
                    idempotency_key=key,
                )
                error.__cause__ = exc
            else:
                meta = {
                    "replayed": response.headers.get(REPLAYED_HEADER) == "true",
                    "request_id": response.headers.get(REQUEST_ID_HEADER),
                    "attempts": attempts,
                }
                if 200 <= response.status_code <= 299:
                    try:
                        return result(response, {**meta, "status_code": response.status_code})
                    except DecodeError as exc:
                        ambiguous = True
                        outcome = Outcome(transport=AMBIGUOUS)
                        error = OutcomeUnknown(
                            f"{method} {path}: HTTP {response.status_code} with a body that "
                            f"is not the documented JSON ({exc})",
                            attempts=attempts,
                            idempotency_key=key,
                            request_id=meta["request_id"],
                        )
                else:
                    outcome, error = self._problem(method, path, response, meta, key)
            decision = decide(
                outcome,
                attempts=attempts,
                elapsed=self._clock.monotonic() - started,
                policy=chosen,
                now=self._clock.time(),
                random=self._random,
            )
            if not decision.retry:
                if decision.retry_after is not None:
                    error.retry_after = decision.retry_after
                    error.not_before = datetime.fromtimestamp(
                        self._clock.time() + decision.retry_after, tz=UTC
                    )
                raise error
            self._sleep(decision.wait)

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        content: bytes | None,
        headers: dict[str, str],
        deadline: float,
        policy: RetryPolicy,
    ) -> httpx.Response:
        left = max(0.0, deadline - self._clock.monotonic())
        timeout = httpx.Timeout(
            connect=min(policy.connect_timeout, left),
            read=min(policy.read_timeout, left),
            write=min(policy.read_timeout, left),
            pool=min(policy.connect_timeout, left),
        )
        guard = attempt_deadline(left) if self._deadline_sockets else contextlib.nullcontext()
        with guard:
            return self._http.request(
                method, path, params=params, content=content, headers=headers, timeout=timeout
            )

    def _problem(
        self,
        method: str,
        path: str,
        response: httpx.Response,
        meta: dict[str, Any],
        key: str | None,
    ) -> tuple[Outcome, MerchantApiError]:
        try:
            document = response.json()
        except ValueError:
            document = None
        problem = document if isinstance(document, dict) else {}
        code = problem.get("code") if isinstance(problem.get("code"), str) else None
        status = response.status_code
        cls = error_class(status, code)
        message = f"{method} {path}: HTTP {status}" + (f" {code}" if code else "")
        error = cls(
            message,
            status_code=status,
            problem=problem,
            attempts=meta["attempts"],
            idempotency_key=key,
            request_id=meta["request_id"],
            replayed=meta["replayed"],
        )
        return Outcome(status, response.headers, code), error


def _transport_kind(exc: httpx.HTTPError) -> str | None:
    """`NOT_SENT` for failures that prove nothing was sent, `AMBIGUOUS` for the others, None
    for a request httpx cannot express (the table of gateway_client.classify_exception);
    re-raises what is no transport failure."""
    kind = classify_exception(exc)
    if kind is None:
        raise exc
    if kind is InvalidRequestError:
        return None
    return NOT_SENT if kind is ConnectionFailedError else AMBIGUOUS


def _json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        raise DecodeError("the body is not JSON") from None


def _retry_after(response: httpx.Response, clock: Clock) -> float | None:
    return server_wait(Outcome(response.status_code, response.headers), now=clock.time())


def _segment(value: str) -> str:
    """An id as one URL path segment (percent-encoded: an id cannot change the route)."""
    if not isinstance(value, str) or not value:
        raise ValueError("an id must be a non-empty string")
    return quote(value, safe="")


def _params(**values: str | int | None) -> dict[str, str]:
    return {name: str(value) for name, value in values.items() if value is not None}

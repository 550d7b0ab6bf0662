"""Delivering the outbox: claim due deliveries, send each once, record what happened.

1. **Claim** (:func:`claim_due`), one short transaction: list the due ``pending`` deliveries of
   enabled endpoints, a few per merchant, merchants longest waiting first; lock their merchants,
   them and their endpoints (``FOR NO KEY UPDATE SKIP LOCKED``: one claimer per merchant and
   per endpoint at a time); pick round robin across merchants (``webhooks.fairness``, ADR 0042)
   within ``merchant_concurrency`` leases per merchant and ``endpoint_concurrency`` per
   endpoint (the ones already held count), and lease the chosen rows with a token. Two workers
   never hold the same delivery; a killed worker's lease runs out and the row is taken again.
2. **Send** (:func:`attempt_claimed`, run by ``webhooks.dispatch``: many in flight per
   process, ADR 0050), outside any transaction and without a pooled database connection
   (:func:`connection_release_before_call`), so one endpoint that hangs holds its own attempts
   only, each for at most its timeouts: the endpoint's breaker first (the ``resilience`` kit's
   failure-rate breaker, one per endpoint: an endpoint that is down is not called, its backlog
   waits), then the URL checked again and pinned to the checked address, then one ``POST``
   signed as Standard Webhooks 1.0 says, no redirect followed, the answer read up to 64 KiB.
3. **Record** (one transaction): the :class:`~webhooks.models.DeliveryAttempt`; a 2xx within
   the timeout is ``delivered``; anything else is retried after a full-jitter wait
   (``uniform(0, bound)``, bounds :data:`RETRY_SCHEDULE`, the last repeated) until the
   delivery's retry window (3 days) ends, then ``failed``. ``410 Gone`` disables the endpoint;
   an endpoint that has failed every attempt for ``disable_after`` (3 days), or every attempt
   of a delivery's whole retry window, is disabled. A
   disabled endpoint's deliveries wait; enabling it again delivers those still in their window.

Nothing here retries around a single attempt: the schedule is the only retry layer.
"""

from __future__ import annotations

import enum
import logging
import random as _random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Count, Q
from django.utils import timezone

from merchants.models import Merchant
from observability.log_filters import redact
from observability.trace_context import payment_trace_span
from resilience import (
    FAILURE,
    SUCCESS,
    BreakerConfig,
    CircuitBreaker,
    MemoryStore,
    RedisStore,
    StateStore,
)
from webhooks.fairness import Candidate, pick_round_robin
from webhooks.metrics import record_delivery_outcome
from webhooks.models import (
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    DisabledReason,
    EndpointStatus,
    WebhookEndpoint,
)
from webhooks.serializers import event_body
from webhooks.signing import webhook_headers
from webhooks.url_safety import Resolver, UnsafeUrl, resolve_allowed

__all__ = [
    "MAX_RESPONSE_BYTES",
    "RETRY_SCHEDULE",
    "AttemptOutcome",
    "DeliveryPolicy",
    "DeliveryRuntime",
    "attempt_claimed",
    "claim_due",
    "connection_release_before_call",
    "endpoint_breaker",
    "retry_wait",
]

logger = logging.getLogger(__name__)

#: Bounds of the full-jitter waits after failed attempts 1, 2, 3 ... (seconds; the last one
#: repeats until the retry window ends): within 30 s, 5 min, 30 min, 2 h, 5 h, then 10 h.
RETRY_SCHEDULE: tuple[float, ...] = (30.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0)
#: The part of an answer's body that is read and stored.
MAX_RESPONSE_BYTES = 64 * 1024


class AttemptOutcome(enum.StrEnum):
    """What one attempt (or one refusal to attempt) came to; the ``outcome`` of the metrics."""

    DELIVERED = "delivered"  #: 2xx within the timeout
    HTTP_ERROR = "http_error"  #: any other status (4xx, 5xx, 1xx)
    REDIRECT = "redirect"  #: 3xx: never followed
    GONE = "gone"  #: 410: the endpoint is disabled
    TIMEOUT = "timeout"  #: no answer within the timeout
    CONNECTION_ERROR = "connection_error"  #: refused, reset, closed, TLS or protocol error
    URL_REFUSED = "url_refused"  #: the URL now resolves to a forbidden address (not sent)
    BREAKER_OPEN = "breaker_open"  #: the endpoint's breaker refused (not sent, no attempt)
    EXPIRED = "expired"  #: the retry window ended: the delivery is ``failed``


@dataclass(frozen=True)
class DeliveryPolicy:
    """The rules of delivery. Durations in seconds (see ``WEBHOOK_*`` in
    docs/configuration.md)."""

    timeout: float = 10.0
    connect_timeout: float = 3.0
    schedule: tuple[float, ...] = RETRY_SCHEDULE
    retry_window: float = 3 * 24 * 3600.0
    disable_after: float = 3 * 24 * 3600.0
    lease: float = 60.0
    batch_size: int = 20
    endpoint_concurrency: int = 2
    merchant_concurrency: int = 4
    threads: int = 8
    allow_local: bool = False

    @classmethod
    def from_settings(cls) -> DeliveryPolicy:
        return cls(
            timeout=settings.WEBHOOK_TIMEOUT_SECONDS,
            connect_timeout=settings.WEBHOOK_CONNECT_TIMEOUT_SECONDS,
            schedule=tuple(float(s) for s in settings.WEBHOOK_RETRY_SCHEDULE_SECONDS),
            retry_window=settings.WEBHOOK_RETRY_WINDOW_SECONDS,
            disable_after=settings.WEBHOOK_DISABLE_AFTER_SECONDS,
            lease=settings.WEBHOOK_LEASE_SECONDS,
            batch_size=settings.WEBHOOK_BATCH_SIZE,
            endpoint_concurrency=settings.WEBHOOK_ENDPOINT_CONCURRENCY,
            merchant_concurrency=settings.WEBHOOK_MERCHANT_CONCURRENCY,
            threads=settings.WEBHOOK_DELIVERY_THREADS,
            allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS,
        )


def retry_wait(failures: int, *, schedule: tuple[float, ...], random: Callable[[], float]) -> float:
    """The wait in seconds after failed attempt number ``failures`` (1-based): full jitter,
    ``random() * bound`` with ``random()`` in [0, 1) and ``bound`` the schedule's entry (its
    last one past the end)."""
    if failures < 1:
        raise ValueError("failures must be >= 1")
    return random() * schedule[min(failures, len(schedule)) - 1]


# --- The per-endpoint breakers (resilience's breaker; state shared through Redis) ----------


def breaker_config() -> BreakerConfig:
    """The breaker of every endpoint (``WEBHOOK_BREAKER_*``; seconds, percent)."""
    return BreakerConfig(
        window_size=settings.WEBHOOK_BREAKER_WINDOW_SIZE,
        minimum_calls=settings.WEBHOOK_BREAKER_MINIMUM_CALLS,
        failure_rate_threshold=settings.WEBHOOK_BREAKER_FAILURE_RATE_THRESHOLD,
        open_duration=settings.WEBHOOK_BREAKER_OPEN_SECONDS,
        half_open_permits=settings.WEBHOOK_BREAKER_HALF_OPEN_PERMITS,
    )


@lru_cache(maxsize=4)
def _state_store(redis_url: str, namespace: str) -> StateStore:
    if redis_url:
        return RedisStore.from_url(redis_url, namespace=namespace)
    return MemoryStore(namespace=namespace)


def endpoint_breaker(
    endpoint_id: str, *, store: StateStore | None = None, config: BreakerConfig | None = None
) -> CircuitBreaker:
    """The breaker of one endpoint (group = its id, name ``webhooks``), in ``store`` (default:
    the shared state of ``ACQUIRER_STATE_REDIS_URL`` under ``WEBHOOK_STATE_NAMESPACE``, so
    every worker sees the same state)."""
    if store is None:
        store = _state_store(settings.ACQUIRER_STATE_REDIS_URL, settings.WEBHOOK_STATE_NAMESPACE)
    return CircuitBreaker(store, endpoint_id, config or breaker_config(), name="webhooks")


def state_stores_reset() -> None:
    """Forget the cached state stores (tests)."""
    _state_store.cache_clear()


_client_lock = threading.Lock()
_clients: dict[str, httpx.Client] = {}


def _http_client() -> httpx.Client:
    """The process's HTTP client: no redirects, no proxies from the environment, and no
    kept-alive connections: an attempt connects to its checked address with its own TLS
    server name, so a connection made for one endpoint is never reused for another one on the
    same address."""
    with _client_lock:
        client = _clients.get("default")
        if client is None:
            client = httpx.Client(
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": "payment-service-webhooks/1"},
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=0),
            )
            _clients["default"] = client
        return client


@dataclass(frozen=True)
class DeliveryRuntime:
    """What a delivery runs with: the policy, the clock (aware datetimes) and random source of
    the schedule, the HTTP client, the breaker factory, the resolver and the monotonic clock of
    the durations. Tests inject each one."""

    policy: DeliveryPolicy
    clock: Callable[[], datetime] = timezone.now
    random: Callable[[], float] = _random.random
    http: Callable[[], httpx.Client] = _http_client
    breaker: Callable[[str], CircuitBreaker] = endpoint_breaker
    resolver: Resolver = socket.getaddrinfo
    monotonic: Callable[[], float] = time.monotonic

    @classmethod
    def from_settings(cls) -> DeliveryRuntime:
        return cls(DeliveryPolicy.from_settings())


# --- 1. Claim -----------------------------------------------------------------------------------


def _due_candidates(now: datetime, policy: DeliveryPolicy, event_id: str | None) -> list[Candidate]:
    """The due, unleased deliveries of enabled live endpoints (of ``event_id`` only, when
    given), at most ``4 x merchant_concurrency`` per merchant, each merchant's oldest due first,
    merchants by their oldest due delivery (the longest waiting first), merchants already at
    their cap left out. One statement (window functions: a scan of the due rows,
    ``delivery_due``), read without locks: the claim locks and counts again."""
    qn = connections[DEFAULT_DB_ALIAS].ops.quote_name
    deliveries, endpoints = qn(Delivery._meta.db_table), qn(WebhookEndpoint._meta.db_table)
    sql = (
        "WITH in_flight AS (SELECT e.merchant_id, count(*) AS n "  # noqa: S608 (names only)
        f"FROM {deliveries} d JOIN {endpoints} e ON e.id = d.endpoint_id "
        "WHERE d.status = %(pending)s AND d.lease_until > %(now)s GROUP BY e.merchant_id), "
        "due AS (SELECT d.id, e.merchant_id, d.endpoint_id, "
        "row_number() OVER (PARTITION BY e.merchant_id ORDER BY d.next_attempt_at, d.id) AS rank, "
        "min(d.next_attempt_at) OVER (PARTITION BY e.merchant_id) AS head "
        f"FROM {deliveries} d JOIN {endpoints} e ON e.id = d.endpoint_id "
        "LEFT JOIN in_flight f ON f.merchant_id = e.merchant_id "
        "WHERE d.status = %(pending)s AND d.next_attempt_at <= %(now)s "
        "AND (d.lease_until IS NULL OR d.lease_until <= %(now)s) "
        "AND e.status = %(enabled)s AND e.deleted_at IS NULL "
        "AND coalesce(f.n, 0) < %(merchant_cap)s"
        + (" AND d.event_id = %(event_id)s" if event_id is not None else "")
        + ") SELECT id, merchant_id, endpoint_id FROM due "
        "WHERE rank <= %(per_merchant)s ORDER BY head, merchant_id, rank LIMIT %(limit)s"
    )
    params: dict[str, object] = {
        "pending": DeliveryStatus.PENDING.value,
        "enabled": EndpointStatus.ENABLED.value,
        "now": now,
        "merchant_cap": policy.merchant_concurrency,
        "per_merchant": 4 * policy.merchant_concurrency,
        "limit": 4 * policy.batch_size,
    }
    if event_id is not None:
        params["event_id"] = event_id
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(sql, params)
        return [Candidate(*row) for row in cursor.fetchall()]


def claim_due(
    *, now: datetime, policy: DeliveryPolicy, event_id: str | None = None, limit: int | None = None
) -> tuple[list[int], str]:
    """Claim up to ``policy.batch_size`` due deliveries (fewer with ``limit``: a deliverer's
    free slots) (of ``event_id`` only, when given),
    picked round robin across merchants (:func:`webhooks.fairness.pick_round_robin`): at most
    ``policy.merchant_concurrency`` leases per merchant and ``policy.endpoint_concurrency`` per
    endpoint, fleet-wide (the ones already held count). Returns their ids in the order to send
    them and the lease token that :func:`deliver_claimed` must present."""
    token = uuid.uuid4().hex
    with transaction.atomic():
        candidates = _due_candidates(now, policy, event_id)
        if not candidates:
            return [], token
        # Lock the candidates' merchants, the candidates and their endpoints, each SKIP LOCKED
        # (never waiting, so never deadlocking): one claimer per merchant and per endpoint at a
        # time, so the in-flight counts below stay true until we commit; what another claimer
        # holds waits for the next claim.
        merchants = set(
            Merchant.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(id__in={c.merchant_id for c in candidates})
            .values_list("id", flat=True)
        )
        lockable = set(
            Delivery.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(id__in=[c.delivery_id for c in candidates if c.merchant_id in merchants])
            .filter(status=DeliveryStatus.PENDING)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lte=now))
            .values_list("id", flat=True)
        )
        candidates = [c for c in candidates if c.delivery_id in lockable]
        endpoint_ids = {c.endpoint_id for c in candidates}
        locked = set(
            WebhookEndpoint.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(id__in=endpoint_ids)
            .values_list("id", flat=True)
        )
        leased = Delivery.objects.filter(status=DeliveryStatus.PENDING, lease_until__gt=now)
        endpoint_in_flight = dict(
            leased.filter(endpoint_id__in=locked)
            .values("endpoint_id")
            .annotate(n=Count("id"))
            .values_list("endpoint_id", "n")
        )
        merchant_in_flight = dict(
            leased.filter(endpoint__merchant_id__in=merchants)
            .values("endpoint__merchant_id")
            .annotate(n=Count("id"))
            .values_list("endpoint__merchant_id", "n")
        )
        chosen = [
            c.delivery_id
            for c in pick_round_robin(
                candidates,
                limit=policy.batch_size if limit is None else min(limit, policy.batch_size),
                merchant_cap=policy.merchant_concurrency,
                endpoint_cap=policy.endpoint_concurrency,
                merchant_in_flight=merchant_in_flight,
                endpoint_in_flight=endpoint_in_flight,
                blocked_endpoints=endpoint_ids - locked,
            )
        ]
        Delivery.objects.filter(id__in=chosen).update(
            lease_until=now + timedelta(seconds=policy.lease), lease_token=token
        )
    return chosen, token


# --- 2. Send ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    outcome: AttemptOutcome
    status_code: int | None
    error: str | None
    body: str
    truncated: bool
    duration: float


def stored_answer_body(raw: bytes) -> str:
    """The text kept of a merchant's answer body (at most ``MAX_RESPONSE_BYTES`` bytes, shown
    to support users in the admin): UTF-8 with bad bytes replaced, NUL (which PostgreSQL text
    cannot hold) as U+FFFD, and card numbers, keys and secrets replaced as the log redaction
    replaces them (``observability.log_filters.redact``: the answer is the merchant's text,
    not ours to refuse, and must not put card data into our tables)."""
    return redact(raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd"))


def _pinned(url: str, address: str) -> tuple[str, str, str]:
    """``url`` aimed at ``address`` (the checked one), the ``Host`` header, the TLS name."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    return target, parts.netloc, parts.hostname or ""


def _classify(status_code: int, elapsed: float, timeout: float) -> AttemptOutcome:
    if elapsed > timeout:
        return AttemptOutcome.TIMEOUT
    if 200 <= status_code < 300:
        return AttemptOutcome.DELIVERED
    if status_code == 410:
        return AttemptOutcome.GONE
    if 300 <= status_code < 400:
        return AttemptOutcome.REDIRECT
    return AttemptOutcome.HTTP_ERROR


def _post(
    runtime: DeliveryRuntime, url: str, address: str, headers: dict[str, str], body: bytes
) -> _Answer:
    """One ``POST``, no redirect followed, the answer read up to :data:`MAX_RESPONSE_BYTES`."""
    policy, monotonic = runtime.policy, runtime.monotonic
    target, host_header, server_name = _pinned(url, address)
    extensions = {"sni_hostname": server_name} if target.startswith("https:") else {}
    started = monotonic()
    try:
        with runtime.http().stream(
            "POST",
            target,
            content=body,
            headers=headers | {"host": host_header},
            extensions=extensions,
            timeout=httpx.Timeout(policy.timeout, connect=policy.connect_timeout),
        ) as response:
            answered = monotonic() - started
            read = bytearray()
            truncated = False
            try:
                for chunk in response.iter_bytes():
                    room = MAX_RESPONSE_BYTES - len(read)
                    read += chunk[:room]
                    if len(chunk) > room or monotonic() - started > policy.timeout:
                        truncated = True
                        break
            except httpx.HTTPError:
                truncated = True  # the status arrived; the rest of the body did not
            return _Answer(
                _classify(response.status_code, answered, policy.timeout),
                response.status_code,
                None,
                stored_answer_body(bytes(read)),
                truncated,
                monotonic() - started,
            )
    except httpx.TimeoutException as exc:
        return _Answer(
            AttemptOutcome.TIMEOUT, None, type(exc).__name__, "", False, monotonic() - started
        )
    except httpx.HTTPError as exc:
        return _Answer(
            AttemptOutcome.CONNECTION_ERROR,
            None,
            type(exc).__name__,
            "",
            False,
            monotonic() - started,
        )


def connection_release_before_call() -> None:
    """Give this thread's database connection back to the pool before the endpoint's DNS
    look-up and ``POST`` (ADR 0050, as the web tier does around the acquirer call, ADR 0048):
    with Django's psycopg pool configured (``DATABASE_POOL``, on in the webhooks worker), the
    record after the answer takes one again, so the connections a worker holds are bounded by
    the pool's size, not by its attempts in flight. Without a pool (a prefork worker), closing
    would mean reconnecting, so the connection stays. Sends no SQL.

    Raises ``RuntimeError`` inside a transaction (``atomic``): no network call holds a lock.
    """
    if connection.in_atomic_block:
        raise RuntimeError("A delivery calls the merchant's server: never inside a transaction.")
    if connection.connection is not None and getattr(connection, "pool", None) is not None:
        connection.close()


# --- 3. Record ----------------------------------------------------------------------------------


def _window_end(delivery: Delivery, policy: DeliveryPolicy) -> datetime:
    return delivery.window_started_at + timedelta(seconds=policy.retry_window)


def _release(delivery_id: int, token: str, *, next_attempt_at: datetime | None = None) -> None:
    """Give a claimed delivery back without an attempt (optionally due later)."""
    changes: dict = {"lease_until": None, "lease_token": None}
    if next_attempt_at is not None:
        changes["next_attempt_at"] = next_attempt_at
    Delivery.objects.filter(pk=delivery_id, lease_token=token).update(**changes)


def _expire(delivery_id: int, token: str) -> None:
    Delivery.objects.filter(pk=delivery_id, lease_token=token).update(
        status=DeliveryStatus.FAILED, next_attempt_at=None, lease_until=None, lease_token=None
    )
    record_delivery_outcome(AttemptOutcome.EXPIRED)


def _disable(endpoint: WebhookEndpoint, reason: str, now: datetime) -> None:
    endpoint.status = EndpointStatus.DISABLED
    endpoint.disabled_reason = reason
    endpoint.disabled_at = now
    logger.warning("webhook endpoint %s disabled: %s", endpoint.id, reason)


def _record(
    delivery: Delivery,
    token: str,
    answer: _Answer,
    *,
    started_at: datetime,
    runtime: DeliveryRuntime,
) -> None:
    """The attempt, its delivery's next state and its endpoint's, in one transaction."""
    policy = runtime.policy
    now = runtime.clock()
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update(no_key=True).get(
            pk=delivery.endpoint_id
        )
        locked = (
            Delivery.objects.select_for_update(no_key=True)
            .filter(pk=delivery.pk, lease_token=token)
            .first()
        )
        number = (locked.attempts if locked is not None else delivery.attempts) + 1
        DeliveryAttempt.objects.create(
            delivery_id=delivery.pk,
            endpoint_id=delivery.endpoint_id,
            event_id=delivery.event_id,
            number=number,
            started_at=started_at,
            duration_ms=max(0, round(answer.duration * 1000)),
            status_code=answer.status_code,
            outcome=answer.outcome.value,
            error=answer.error,
            response_body=answer.body,
            response_truncated=answer.truncated,
        )
        endpoint_changes: set[str] = set()
        if answer.outcome is AttemptOutcome.DELIVERED:
            if endpoint.failing_since is not None:
                endpoint.failing_since = None
                endpoint_changes.add("failing_since")
        else:
            if endpoint.failing_since is None:
                endpoint.failing_since = started_at
                endpoint_changes.add("failing_since")
            if answer.outcome is AttemptOutcome.GONE and endpoint.status == EndpointStatus.ENABLED:
                _disable(endpoint, DisabledReason.GONE, now)
            elif (
                endpoint.status == EndpointStatus.ENABLED
                and (now - endpoint.failing_since).total_seconds() >= policy.disable_after
            ):
                _disable(endpoint, DisabledReason.FAILING, now)
            endpoint_changes.update({"status", "disabled_reason", "disabled_at"})
        if endpoint_changes:
            endpoint.updated_at = now
            endpoint.save(update_fields=[*endpoint_changes, "updated_at"])
        if locked is None:
            return  # the lease ran out and another worker owns the delivery now: it decides
        locked.attempts = number
        locked.last_status_code = answer.status_code
        locked.last_error = answer.error or (
            None if answer.outcome is AttemptOutcome.DELIVERED else answer.outcome.value
        )
        locked.lease_until = None
        locked.lease_token = None
        if answer.outcome is AttemptOutcome.DELIVERED:
            locked.status = DeliveryStatus.DELIVERED
            locked.delivered_at = now
            locked.next_attempt_at = None
        else:
            wait = retry_wait(number, schedule=policy.schedule, random=runtime.random)
            locked.next_attempt_at = now + timedelta(seconds=wait)
            if locked.next_attempt_at >= _window_end(locked, policy):
                locked.status = DeliveryStatus.FAILED
                locked.next_attempt_at = None
                record_delivery_outcome(AttemptOutcome.EXPIRED)
                # Every attempt of a whole retry window failed: the endpoint is failing too.
                if (
                    endpoint.status == EndpointStatus.ENABLED
                    and endpoint.failing_since is not None
                    and endpoint.failing_since <= locked.window_started_at
                ):
                    _disable(endpoint, DisabledReason.FAILING, now)
                    endpoint.updated_at = now
                    endpoint.save(
                        update_fields=["status", "disabled_reason", "disabled_at", "updated_at"]
                    )
        locked.save()
    record_delivery_outcome(answer.outcome)


def attempt_claimed(
    delivery_id: int, token: str, runtime: DeliveryRuntime
) -> AttemptOutcome | None:
    """Send one claimed delivery (leased under ``token``) and record it, in the calling thread:
    at most one attempt, bounded by the policy's timeouts; no transaction may be open (raises
    ``RuntimeError``). Returns its outcome; None when the delivery is no longer ours (the lease
    ran out) or no longer to be sent (delivered, endpoint disabled or deleted: released)."""
    if connection.in_atomic_block:
        raise RuntimeError("A delivery calls the merchant's server: never inside a transaction.")
    delivery = (
        Delivery.objects.select_related("event", "endpoint")
        .filter(pk=delivery_id, lease_token=token)
        .first()
    )
    if delivery is None:
        return None
    event = delivery.event
    found = {"payments.webhook.event_id": event.pk, "payments.webhook.event_type": event.type,
             "payments.webhook.endpoint_id": delivery.endpoint_id}  # fmt: skip
    # In the trace of the change that made the event, whoever sends it (ADR 0044); httpx's
    # instrumentation sends the merchant that trace's traceparent.
    with payment_trace_span("webhook deliver", event.trace_context, found) as span:
        outcome = _attempt_loaded(delivery, token, runtime)
        span.set_attribute("payments.webhook.outcome", outcome.value if outcome else "not_sent")
        return outcome


def _attempt_loaded(
    delivery: Delivery, token: str, runtime: DeliveryRuntime
) -> AttemptOutcome | None:
    delivery_id = delivery.pk
    endpoint, policy, now = delivery.endpoint, runtime.policy, runtime.clock()
    if (
        delivery.status != DeliveryStatus.PENDING
        or endpoint.status != EndpointStatus.ENABLED
        or endpoint.deleted_at is not None
    ):
        _release(delivery_id, token)
        return None
    if now >= _window_end(delivery, policy):
        _expire(delivery_id, token)
        return AttemptOutcome.EXPIRED
    breaker = runtime.breaker(endpoint.id)
    admission = breaker.acquire(lease=2 * policy.timeout + policy.connect_timeout)
    if not admission.admitted:
        _release(
            delivery_id,
            token,
            next_attempt_at=now + timedelta(seconds=max(1.0, admission.retry_after)),
        )
        record_delivery_outcome(AttemptOutcome.BREAKER_OPEN)
        return AttemptOutcome.BREAKER_OPEN
    body = event_body(delivery.event)
    headers = webhook_headers(
        endpoint.signing_secrets(now),
        msg_id=delivery.event_id,
        timestamp=int(now.timestamp()),
        body=body,
    )
    connection_release_before_call()  # the look-up and the POST hold no database connection
    try:
        addresses = resolve_allowed(
            endpoint.url, allow_local=policy.allow_local, resolver=runtime.resolver
        )
    except UnsafeUrl as exc:
        breaker.release(admission)  # our refusal says nothing about the endpoint's health
        answer = _Answer(AttemptOutcome.URL_REFUSED, None, exc.code, "", False, 0.0)
    else:
        answer = _post(runtime, endpoint.url, addresses[0], headers, body)
        breaker.record(
            admission,
            SUCCESS if answer.outcome is AttemptOutcome.DELIVERED else FAILURE,
            duration=answer.duration,
        )
    _record(delivery, token, answer, started_at=now, runtime=runtime)
    return answer.outcome

"""In-memory state of the sandbox acquirer: ledger, idempotency records, counters.

Everything lives in one ``SandboxStore`` guarded by one lock, so it is safe to share between
the server's request threads. Nothing is persisted: a restart forgets every charge and key.

Idempotency follows the Stripe-like model, scoped per account (one account per API key)::

    begin(account, key, fingerprint)
      no live record           -> Claimed(claim)   the caller runs the request, then
                                                   commit(claim, ...) or release(claim)
      record in progress       -> KeyInUse         answer 409
      completed, same print    -> Replay(response) answer the stored response again
      completed, other print   -> KeyReused        answer 422

A record lives from its first request for ``idempotency_retention`` (24 h by default); it
counts as absent as soon as it has expired, whether or not a purge has run. Expiry is decided
with the injected ``clock``, so tests move time instead of sleeping. A record still in
progress never expires: it belongs to a request that is running.

``reset()`` starts a new *generation*: it clears everything, and work begun before it (a
claim, a request being counted) is silently discarded when it finishes, so a slow request
from before a reset never leaks into the counters after it.

Memory is bounded for long benchmarks: every per-key or per-reference table (idempotency
records, attempt counters, the lookup ledger, the per-key and per-reference counters) keeps at
most ``max_tracked_keys`` entries (100 000 by default) and drops its oldest entry beyond that;
arrival counts keep the latest ``max_arrival_buckets`` 100 ms buckets (36 000, one hour).
The settlement listing (``ledger()``, every charge in commit order) keeps the same number of
charges. Every drop is counted in ``stats()["evicted"]``, so a benchmark can tell whether the
bound was reached. Completed idempotency records are evicted oldest first; records in progress
never.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox_acquirer.models import Charge, StoredResponse

__all__ = [
    "ARRIVAL_BUCKET_MS",
    "DEFAULT_IDEMPOTENCY_RETENTION",
    "DEFAULT_MAX_ARRIVAL_BUCKETS",
    "DEFAULT_MAX_TRACKED_KEYS",
    "UNANSWERED",
    "BeginResult",
    "Claim",
    "Claimed",
    "Clock",
    "KeyInUse",
    "KeyReused",
    "Replay",
    "SandboxStore",
    "utc_now",
]

#: How long an idempotency record is kept after its first request (Stripe: at least 24 h).
DEFAULT_IDEMPOTENCY_RETENTION = timedelta(hours=24)
#: Entries kept per table (idempotency records, ledger, per-key and per-reference counters).
DEFAULT_MAX_TRACKED_KEYS = 100_000
#: Width of one arrival bucket, in milliseconds.
ARRIVAL_BUCKET_MS = 100
#: Arrival buckets kept (36 000 x 100 ms = one hour).
DEFAULT_MAX_ARRIVAL_BUCKETS = 36_000
#: How a request can end without an HTTP answer (counted apart from the statuses).
UNANSWERED = ("reset", "close", "refused")

#: Returns the current time as an aware UTC datetime.
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock, as an aware UTC datetime (the default ``Clock``)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Claim:
    """Proof that one request owns an idempotency key while it runs.

    Hand it back to ``SandboxStore.commit`` or ``SandboxStore.release``.
    """

    account: str
    key: str
    generation: int
    claim_id: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key was free (or expired): the caller now owns it through ``claim``."""

    claim: Claim


@dataclass(frozen=True, slots=True)
class Replay:
    """The key completed earlier with the same request: send ``response`` again."""

    response: StoredResponse


@dataclass(frozen=True, slots=True)
class KeyReused:
    """The key completed earlier with a different request (answer 422)."""


@dataclass(frozen=True, slots=True)
class KeyInUse:
    """Another request with this key is still running (answer 409)."""


BeginResult = Claimed | Replay | KeyReused | KeyInUse


@dataclass(slots=True)
class _Record:
    fingerprint: str
    expires_at: datetime
    claim_id: int
    response: StoredResponse | None = None  # None while in progress


class _BoundedCounter:
    """A counter keeping at most ``limit`` keys; the oldest key goes first (FIFO)."""

    __slots__ = ("_counts", "_limit", "evicted")

    def __init__(self, limit: int) -> None:
        self._counts: OrderedDict[Hashable, int] = OrderedDict()
        self._limit = limit
        self.evicted = 0

    def add(self, key: Hashable, amount: int = 1) -> int:
        """Add ``amount`` to ``key``; returns the new count."""
        value = self._counts.get(key, 0) + amount
        self._counts[key] = value
        while len(self._counts) > self._limit:
            self._counts.popitem(last=False)
            self.evicted += 1
        return value

    def get(self, key: Hashable) -> int:
        return self._counts.get(key, 0)

    def items(self) -> list[tuple[Hashable, int]]:
        return list(self._counts.items())

    def __len__(self) -> int:
        return len(self._counts)


@dataclass(slots=True)
class _State:
    limit: int
    bucket_limit: int
    records: OrderedDict[tuple[str, str], _Record] = field(default_factory=OrderedDict)
    records_evicted: int = 0
    # The ledger for GET /charges: (charge, visible_at) per (account, reference), plus the
    # global insertion order, so the oldest entry can be dropped beyond the bound.
    lookup: dict[tuple[str, str], deque[tuple[Charge, datetime]]] = field(default_factory=dict)
    lookup_order: deque[tuple[str, str]] = field(default_factory=deque)
    lookup_evicted: int = 0
    # Every recorded charge in commit order, (account, idempotency key, charge): the
    # settlement-style listing of GET /_sandbox/charges (no lookup lag), bounded like the rest.
    ledger: deque[tuple[str, str, Charge]] = field(default_factory=deque)
    ledger_evicted: int = 0
    charges_total: int = 0
    charges_by_reference: _BoundedCounter = field(init=False)
    charges_by_key: _BoundedCounter = field(init=False)
    requests_by_key: _BoundedCounter = field(init=False)
    attempts: _BoundedCounter = field(init=False)
    arrivals: _BoundedCounter = field(init=False)
    requests_by_status: Counter[int] = field(default_factory=Counter)
    requests_unanswered: Counter[str] = field(default_factory=Counter)
    requests_by_endpoint: dict[str, Counter[str]] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.charges_by_reference = _BoundedCounter(self.limit)
        self.charges_by_key = _BoundedCounter(self.limit)
        self.requests_by_key = _BoundedCounter(self.limit)
        self.attempts = _BoundedCounter(self.limit)
        self.arrivals = _BoundedCounter(self.bucket_limit)


class SandboxStore:
    """The acquirer's ledger, idempotency records and request counters, thread-safe.

    ``clock`` returns aware UTC datetimes (``utc_now`` by default); it dates charges, decides
    expiry, lookup lag and arrival buckets. ``idempotency_retention`` is how long a key is
    remembered after its first request. ``max_tracked_keys`` and ``max_arrival_buckets``
    bound memory (see the module docstring).
    """

    def __init__(
        self,
        *,
        clock: Clock = utc_now,
        idempotency_retention: timedelta = DEFAULT_IDEMPOTENCY_RETENTION,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
        max_arrival_buckets: int = DEFAULT_MAX_ARRIVAL_BUCKETS,
    ) -> None:
        if idempotency_retention <= timedelta(0):
            raise ValueError("idempotency_retention must be positive")
        if max_tracked_keys < 1 or max_arrival_buckets < 1:
            raise ValueError("max_tracked_keys and max_arrival_buckets must be at least 1")
        self._clock = clock
        self._retention = idempotency_retention
        self._limit = max_tracked_keys
        self._bucket_limit = max_arrival_buckets
        self._lock = threading.Lock()
        self._claim_ids = itertools.count(1)
        self._generation = 0
        self._state = self._new_state()
        # Gauges: live values, not cleared by reset().
        self._open_connections = 0
        self._in_flight = 0

    @property
    def idempotency_retention(self) -> timedelta:
        """How long a key is remembered after its first request."""
        return self._retention

    @property
    def max_tracked_keys(self) -> int:
        """The bound on every per-key and per-reference table."""
        return self._limit

    @property
    def generation(self) -> int:
        """Incremented by every ``reset()``; pass it to ``count_request``."""
        with self._lock:
            return self._generation

    def now(self) -> datetime:
        """The store's clock: the time charges are dated with and expiry is judged by."""
        return self._clock()

    # -- idempotency ------------------------------------------------------------------

    def begin(self, account: str, key: str, fingerprint: str) -> BeginResult:
        """Look up ``key`` for ``account`` and claim it if it is free.

        ``fingerprint`` identifies the request (equal for equal requests); see the module
        docstring for the four outcomes.
        """
        with self._lock:
            now = self._clock()
            self._purge_expired(now)
            records = self._state.records
            record = records.get((account, key))
            if record is not None and self._is_expired(record, now):
                del records[(account, key)]
                record = None
            if record is None:
                claim_id = next(self._claim_ids)
                records[(account, key)] = _Record(
                    fingerprint=fingerprint,
                    expires_at=now + self._retention,
                    claim_id=claim_id,
                )
                self._evict_records()
                return Claimed(Claim(account, key, self._generation, claim_id))
            if record.response is None:
                return KeyInUse()
            if record.fingerprint != fingerprint:
                return KeyReused()
            return Replay(record.response)

    def commit(
        self,
        claim: Claim,
        charge: Charge,
        response: StoredResponse,
        *,
        visible_after: timedelta = timedelta(0),
    ) -> bool:
        """Record ``charge`` and complete the claimed key with ``response``, atomically.

        From then on the key replays ``response``. ``GET /charges`` lists the charge once
        ``visible_after`` has passed (lookup lag); the counters count it at once. Returns
        ``False`` (and records nothing) when the claim is stale: a ``reset()`` happened since
        it was made.
        """
        with self._lock:
            record = self._owned_record(claim)
            if record is None:
                return False
            record.response = response
            state = self._state
            scope = (claim.account, charge.reference)
            state.lookup.setdefault(scope, deque()).append((charge, self._clock() + visible_after))
            state.lookup_order.append(scope)
            while len(state.lookup_order) > self._limit:
                oldest = state.lookup_order.popleft()
                entries = state.lookup[oldest]
                entries.popleft()
                if not entries:
                    del state.lookup[oldest]
                state.lookup_evicted += 1
            state.ledger.append((claim.account, claim.key, charge))
            while len(state.ledger) > self._limit:
                state.ledger.popleft()
                state.ledger_evicted += 1
            state.charges_total += 1
            state.charges_by_reference.add(charge.reference)
            state.charges_by_key.add(claim.key)
            return True

    def release(self, claim: Claim) -> None:
        """Give up a claimed key without recording anything, so a retry runs afresh.

        Does nothing if the key was already completed or the claim is stale.
        """
        with self._lock:
            record = self._owned_record(claim)
            if record is not None and record.response is None:
                del self._state.records[(claim.account, claim.key)]

    def purge_expired(self) -> int:
        """Delete expired records now; returns how many. ``begin`` also does this."""
        with self._lock:
            return self._purge_expired(self._clock())

    def count_attempt(self, account: str, key: str) -> int:
        """Count one attempt with ``key`` for ``account``; returns its number (1, 2, ...).

        Scenarios such as ``tok_fail_503_2`` use it to fail the first attempts of a key.
        """
        with self._lock:
            return self._state.attempts.add((account, key))

    # -- ledger and counters ------------------------------------------------------------

    def charges_for(self, account: str, reference: str) -> list[Charge]:
        """``account``'s visible charges with this merchant ``reference``, oldest first.

        A charge recorded with a lookup lag is left out until its lag has passed.
        """
        with self._lock:
            now = self._clock()
            entries = self._state.lookup.get((account, reference), ())
            return [charge for charge, visible_at in entries if visible_at <= now]

    def ledger(
        self,
        account: str,
        *,
        since: datetime | None = None,
        starting_after: str | None = None,
        limit: int = 1000,
    ) -> tuple[list[tuple[str, Charge]], bool]:
        """``account``'s recorded charges in the order they were recorded, as
        ``(idempotency key, charge)``, with ``created_at >= since``, after the charge with id
        ``starting_after`` (a cursor from the previous page), at most ``limit`` of them; and
        whether more follow. Unlike ``charges_for``, no lookup lag applies: this is the
        settlement report, not the look-up API. ``starting_after`` unknown: ``KeyError``.
        """
        with self._lock:
            entries = iter(self._state.ledger)
            if starting_after is not None:
                for entry_account, _, charge in entries:
                    if entry_account == account and charge.id == starting_after:
                        break
                else:
                    raise KeyError(starting_after)
            page: list[tuple[str, Charge]] = []
            for entry_account, key, charge in entries:
                if entry_account != account or (since is not None and charge.created_at < since):
                    continue
                if len(page) == limit:
                    return page, True
                page.append((key, charge))
            return page, False

    def count_arrival(self, *, generation: int, idempotency_key: str | None = None) -> None:
        """Count one request arriving now (100 ms buckets), and per ``idempotency_key``.

        Called when a request to the acquirer API has been read, before it is answered.
        """
        with self._lock:
            if generation != self._generation:
                return
            epoch = self._clock().timestamp()
            bucket = math.floor(epoch * 1000 / ARRIVAL_BUCKET_MS) * ARRIVAL_BUCKET_MS
            self._state.arrivals.add(bucket)
            if idempotency_key is not None:
                self._state.requests_by_key.add(idempotency_key)

    def count_request(
        self, status: int | str, *, generation: int, endpoint: str | None = None
    ) -> None:
        """Count one finished request: an HTTP ``status``, or one of ``UNANSWERED``.

        ``generation`` is ``self.generation`` read when the request arrived; a request that
        began before the last ``reset()`` is not counted. ``endpoint`` (``"POST /charges"``)
        adds it to the per-endpoint table.
        """
        with self._lock:
            if generation != self._generation:
                return
            state = self._state
            if isinstance(status, int):
                state.requests_by_status[status] += 1
            else:
                state.requests_unanswered[status] += 1
            if endpoint is not None:
                table = state.requests_by_endpoint.setdefault(endpoint, Counter())
                table["total"] += 1
                table[str(status)] += 1

    def count_fault(self, reason: str, *, generation: int | None = None) -> None:
        """Count one injected failure under ``reason`` (``tok_fail``, ``outage``, ...)."""
        with self._lock:
            if generation is None or generation == self._generation:
                self._state.faults[reason] += 1

    def connection_opened(self) -> None:
        """A client connection was accepted (gauge for ``open_connections``)."""
        with self._lock:
            self._open_connections += 1

    def connection_closed(self) -> None:
        """A client connection ended."""
        with self._lock:
            self._open_connections -= 1

    def enter_request(self) -> int:
        """A request starts being processed; returns how many are now (itself included)."""
        with self._lock:
            self._in_flight += 1
            return self._in_flight

    def leave_request(self) -> None:
        """A request counted by ``enter_request`` has been processed."""
        with self._lock:
            self._in_flight -= 1

    def stats(self) -> dict[str, Any]:
        """Counters since the last reset, JSON-ready (see docs/sandbox.md for the shape).

        The first four keys are the original ones: ``charges_total``,
        ``charges_by_reference``, ``requests_total`` (answered requests) and
        ``requests_by_status`` (status as a string).
        """
        with self._lock:
            state = self._state
            return {
                "charges_total": state.charges_total,
                "charges_by_reference": dict(state.charges_by_reference.items()),
                "requests_total": sum(state.requests_by_status.values()),
                "requests_by_status": {
                    str(status): count for status, count in sorted(state.requests_by_status.items())
                },
                "requests_unanswered": dict(sorted(state.requests_unanswered.items())),
                "requests_by_endpoint": {
                    endpoint: dict(sorted(counts.items()))
                    for endpoint, counts in sorted(state.requests_by_endpoint.items())
                },
                "requests_by_idempotency_key": dict(state.requests_by_key.items()),
                "charges_by_idempotency_key": dict(state.charges_by_key.items()),
                "faults_injected": dict(sorted(state.faults.items())),
                "arrivals_per_100ms": {
                    str(bucket): count for bucket, count in sorted(state.arrivals.items())
                },
                "open_connections": self._open_connections,
                "requests_in_flight": self._in_flight,
                "idempotency_keys": len(state.records),
                "bounds": {
                    "max_tracked_keys": self._limit,
                    "max_arrival_buckets": self._bucket_limit,
                },
                "evicted": {
                    "idempotency_keys": state.records_evicted,
                    "charges_for_lookup": state.lookup_evicted,
                    "charges_listed": state.ledger_evicted,
                    "charges_by_reference": state.charges_by_reference.evicted,
                    "charges_by_idempotency_key": state.charges_by_key.evicted,
                    "requests_by_idempotency_key": state.requests_by_key.evicted,
                    "attempt_counters": state.attempts.evicted,
                    "arrivals_per_100ms": state.arrivals.evicted,
                },
            }

    def reset(self) -> None:
        """Forget every charge, idempotency record and counter; start a new generation.

        The live gauges (open connections, requests in flight) are not counters and stay.
        """
        with self._lock:
            self._generation += 1
            self._state = self._new_state()

    # -- internals (call with the lock held) -----------------------------------------------

    def _new_state(self) -> _State:
        return _State(limit=self._limit, bucket_limit=self._bucket_limit)

    def _owned_record(self, claim: Claim) -> _Record | None:
        if claim.generation != self._generation:
            return None
        record = self._state.records.get((claim.account, claim.key))
        if record is None or record.claim_id != claim.claim_id:
            return None
        return record

    @staticmethod
    def _is_expired(record: _Record, now: datetime) -> bool:
        return record.response is not None and now > record.expires_at

    def _purge_expired(self, now: datetime) -> int:
        # Records are inserted in order of their first request, so expired ones sit at the
        # front: stop at the first completed record that is still alive. In-progress records
        # are skipped, never deleted.
        expired: list[tuple[str, str]] = []
        for scope, record in self._state.records.items():
            if record.response is None:
                continue
            if not self._is_expired(record, now):
                break
            expired.append(scope)
        for scope in expired:
            del self._state.records[scope]
        return len(expired)

    def _evict_records(self) -> None:
        # Beyond the bound, drop the oldest completed records (in-progress ones belong to
        # running requests and stay).
        records = self._state.records
        excess = len(records) - self._limit
        if excess <= 0:
            return
        victims: list[tuple[str, str]] = []
        for scope, record in records.items():
            if record.response is not None:
                victims.append(scope)
                if len(victims) == excess:
                    break
        for scope in victims:
            del records[scope]
        self._state.records_evicted += len(victims)

"""In-memory state of the sandbox acquirer: ledger, idempotency records, counters.

Everything lives in one ``SandboxStore`` guarded by one lock, so it is safe to share between
the server's request threads. Without a ``journal`` nothing is persisted: a restart forgets
every charge and key. With one (``--data-dir``, ``sandbox_acquirer/journal.py``) every charge
and operation is appended to it as it is recorded and replayed when the store is built, so
charges, refunds and completed idempotency keys survive a restart.

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
charges, and so do the index of charges by id (what captures, voids and refunds find), the
refunds kept for ``GET /refunds`` and the refund listing (``refund_ledger()``). Every drop
is counted in ``stats()["evicted"]``, so a benchmark can tell whether the bound was reached.
Completed idempotency records are evicted oldest first; records in progress never.

Captures, voids and refunds (``commit_operation``) check the acquirer's rules
(``models.Charge.captured_by`` and the others) and record their result under the same lock
that completes the idempotency key, so two concurrent captures of one charge, or ten
concurrent refunds, are decided one after the other: exactly one capture wins, and refunds
never exceed the captured amount.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sandbox_acquirer.journal import (
    Journal,
    charge_from_json,
    charge_to_json,
    refund_from_json,
    refund_to_json,
    response_from_json,
    response_to_json,
)
from sandbox_acquirer.models import Charge, OperationRefused, Refund, StoredResponse

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
    "OperationKind",
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

#: The operations ``commit_operation`` records.
OperationKind = Literal["capture", "void", "refund"]


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


@dataclass(slots=True)
class _ChargeEntry:
    """One recorded charge as the store holds it: its current value (replaced by captures,
    voids and refunds, under the lock) and the caller's opaque ``plan`` (the app keeps the
    token's per-operation faults there)."""

    account: str
    charge: Charge
    plan: Any = None


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


class _ReferenceIndex:
    """Items per ``(account, reference)``, oldest first, each with the time it becomes
    visible; at most ``limit`` items in all, the oldest dropped first (``evicted``)."""

    __slots__ = ("_entries", "_limit", "_order", "evicted")

    def __init__(self, limit: int) -> None:
        self._entries: dict[tuple[str, str], deque[tuple[Any, datetime]]] = {}
        self._order: deque[tuple[str, str]] = deque()
        self._limit = limit
        self.evicted = 0

    def add(self, scope: tuple[str, str], item: Any, visible_at: datetime) -> None:
        self._entries.setdefault(scope, deque()).append((item, visible_at))
        self._order.append(scope)
        while len(self._order) > self._limit:
            oldest = self._order.popleft()
            entries = self._entries[oldest]
            entries.popleft()
            if not entries:
                del self._entries[oldest]
            self.evicted += 1

    def visible(self, scope: tuple[str, str], now: datetime) -> list[Any]:
        return [item for item, visible_at in self._entries.get(scope, ()) if visible_at <= now]


class _BoundedLog:
    """``(account, idempotency key, item)`` rows in commit order; at most ``limit``, the
    oldest dropped first (``evicted``)."""

    __slots__ = ("_limit", "evicted", "rows")

    def __init__(self, limit: int) -> None:
        self.rows: deque[tuple[str, str, Any]] = deque()
        self._limit = limit
        self.evicted = 0

    def append(self, account: str, key: str, item: Any) -> None:
        self.rows.append((account, key, item))
        while len(self.rows) > self._limit:
            self.rows.popleft()
            self.evicted += 1


@dataclass(slots=True)
class _State:
    limit: int
    bucket_limit: int
    records: OrderedDict[tuple[str, str], _Record] = field(default_factory=OrderedDict)
    records_evicted: int = 0
    # GET /charges: the _ChargeEntry objects per (account, reference), with lookup lag.
    lookup: _ReferenceIndex = field(init=False)
    # Every recorded charge in commit order (_ChargeEntry items): the settlement-style
    # listing of GET /_sandbox/charges (no lookup lag), bounded like the rest.
    ledger: _BoundedLog = field(init=False)
    # Charges by (account, id), oldest first: what captures, voids and refunds find.
    charges: OrderedDict[tuple[str, str], _ChargeEntry] = field(default_factory=OrderedDict)
    charges_evicted: int = 0
    # Refunds, the same two ways: GET /refunds?reference= and GET /_sandbox/refunds.
    refund_lookup: _ReferenceIndex = field(init=False)
    refund_ledger: _BoundedLog = field(init=False)
    operations_total: Counter[str] = field(default_factory=Counter)
    operations_by_reference: dict[str, _BoundedCounter] = field(init=False)
    operations_by_key: dict[str, _BoundedCounter] = field(init=False)
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
        self.lookup = _ReferenceIndex(self.limit)
        self.refund_lookup = _ReferenceIndex(self.limit)
        self.ledger = _BoundedLog(self.limit)
        self.refund_ledger = _BoundedLog(self.limit)
        self.charges_by_reference = _BoundedCounter(self.limit)
        self.charges_by_key = _BoundedCounter(self.limit)
        self.requests_by_key = _BoundedCounter(self.limit)
        self.attempts = _BoundedCounter(self.limit)
        self.arrivals = _BoundedCounter(self.bucket_limit)
        self.operations_by_reference = {
            kind: _BoundedCounter(self.limit) for kind in _OPERATION_KINDS
        }
        self.operations_by_key = {kind: _BoundedCounter(self.limit) for kind in _OPERATION_KINDS}


_OPERATION_KINDS: tuple[OperationKind, ...] = ("capture", "void", "refund")
#: Stats names of each operation's counters: totals, per charge reference, per key.
_OPERATION_PLURALS = {"capture": "captures", "void": "voids", "refund": "refunds"}


class SandboxStore:
    """The acquirer's ledger, idempotency records and request counters, thread-safe.

    ``clock`` returns aware UTC datetimes (``utc_now`` by default); it dates charges, decides
    expiry, lookup lag and arrival buckets. ``idempotency_retention`` is how long a key is
    remembered after its first request. ``max_tracked_keys`` and ``max_arrival_buckets``
    bound memory (see the module docstring). ``journal`` keeps the records across restarts:
    its entries are replayed here, and every new record is appended to it.
    """

    def __init__(
        self,
        *,
        clock: Clock = utc_now,
        idempotency_retention: timedelta = DEFAULT_IDEMPOTENCY_RETENTION,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
        max_arrival_buckets: int = DEFAULT_MAX_ARRIVAL_BUCKETS,
        journal: Journal | None = None,
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
        self._journal = journal
        if journal is not None:
            for entry in journal.entries():
                self._replay(entry)

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
        plan: Any = None,
    ) -> bool:
        """Record ``charge`` and complete the claimed key with ``response``, atomically.

        From then on the key replays ``response``. ``GET /charges`` lists the charge once
        ``visible_after`` has passed (lookup lag); the counters count it at once. ``plan`` is
        kept with the charge for the caller (``charge_plan``). Returns ``False`` (and
        records nothing) when the claim is stale: a ``reset()`` happened since it was made.
        """
        with self._lock:
            record = self._owned_record(claim)
            if record is None:
                return False
            record.response = response
            visible_at = self._clock() + visible_after
            self._record_charge(claim.account, claim.key, charge, plan, visible_at)
            self._journal_append("charge", claim, record, visible_at, charge=charge_to_json(charge))
            return True

    def charge_plan(self, account: str, charge_id: str) -> tuple[Charge, Any]:
        """``account``'s charge ``charge_id`` as it stands now, with the ``plan`` given to
        ``commit``. Raises ``OperationRefused`` 404 ``charge_not_found`` for an unknown id,
        another account's charge, or one dropped beyond ``max_tracked_keys``."""
        with self._lock:
            entry = self._entry(account, charge_id)
            return entry.charge, entry.plan

    def charge_change(self, charge_id: str, change: Callable[[Charge, datetime], Charge]) -> Charge:
        """Replace charge ``charge_id`` (of any account) by ``change(charge, now)`` under the
        lock, so two answers to one challenge are decided one at a time; ``change`` refuses
        with ``OperationRefused`` (nothing changes). Unknown: ``OperationRefused`` 404.
        Journaled (``charge_change``), so a restarted sandbox shows the charge as changed.
        """
        with self._lock:
            entry = next(
                (e for (_, cid), e in self._state.charges.items() if cid == charge_id), None
            )
            if entry is None:
                raise OperationRefused(
                    "charge_not_found", f"No charge {charge_id[:64]!r}.", status=404
                )
            entry.charge = change(entry.charge, self._clock())
            if self._journal is not None:
                self._journal.append(
                    {
                        "type": "charge_change",
                        "account": entry.account,
                        "charge": charge_to_json(entry.charge),
                    }
                )
            return entry.charge

    def commit_operation(
        self,
        claim: Claim,
        kind: OperationKind,
        charge_id: str,
        apply: Callable[[Charge, datetime], tuple[Charge, Refund | None]],
        render: Callable[[Charge, Refund | None], StoredResponse],
        *,
        visible_after: timedelta = timedelta(0),
    ) -> tuple[Charge, Refund | None] | None:
        """Apply a capture, void or refund (``kind``) to charge ``charge_id`` and complete
        the claimed key, atomically under the store's lock.

        ``apply(charge, now)`` returns the charge's new value and, for a refund, the refund
        to record; it enforces the acquirer's rules by raising ``OperationRefused``, which
        propagates with nothing recorded (the caller then releases the claim). An unknown
        charge raises ``OperationRefused`` 404. ``render(charge, refund)`` makes the response
        the key replays from then on. ``GET /refunds`` lists a refund once ``visible_after``
        has passed. Returns ``(charge, refund)``, or ``None`` (nothing recorded) when the
        claim is stale after a ``reset()``.
        """
        with self._lock:
            record = self._owned_record(claim)
            if record is None:
                return None
            entry = self._entry(claim.account, charge_id)
            now = self._clock()
            charge, refund = apply(entry.charge, now)
            record.response = render(charge, refund)
            visible_at = now + visible_after
            self._record_operation(claim.account, claim.key, kind, charge, refund, visible_at)
            self._journal_append(
                "operation",
                claim,
                record,
                visible_at,
                kind=kind,
                charge=charge_to_json(charge),
                refund=None if refund is None else refund_to_json(refund),
            )
            return charge, refund

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
            entries = self._state.lookup.visible((account, reference), self._clock())
            return [entry.charge for entry in entries]

    def refunds_for(self, account: str, reference: str) -> list[Refund]:
        """``account``'s visible refunds with the caller's refund ``reference``, oldest
        first (a refund recorded with a lookup lag is left out until it has passed)."""
        with self._lock:
            return self._state.refund_lookup.visible((account, reference), self._clock())

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
            rows = (
                (account_, key, entry.charge) for account_, key, entry in self._state.ledger.rows
            )
            return _page(rows, account, since, starting_after, limit)

    def refund_ledger(
        self,
        account: str,
        *,
        since: datetime | None = None,
        starting_after: str | None = None,
        limit: int = 1000,
    ) -> tuple[list[tuple[str, Refund]], bool]:
        """``account``'s recorded refunds (succeeded and failed) in the order they were
        recorded, as ``(idempotency key, refund)``; paged and filtered like ``ledger``
        (``starting_after`` a refund id; unknown: ``KeyError``)."""
        with self._lock:
            return _page(self._state.refund_ledger.rows, account, since, starting_after, limit)

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
                **self._operation_stats(state),
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
                    "charges_for_lookup": state.lookup.evicted,
                    "charges_listed": state.ledger.evicted,
                    "charges_for_operations": state.charges_evicted,
                    "refunds_for_lookup": state.refund_lookup.evicted,
                    "refunds_listed": state.refund_ledger.evicted,
                    "charges_by_reference": state.charges_by_reference.evicted,
                    "charges_by_idempotency_key": state.charges_by_key.evicted,
                    "requests_by_idempotency_key": state.requests_by_key.evicted,
                    **{
                        f"{_OPERATION_PLURALS[kind]}_by_{table}": counters[kind].evicted
                        for table, counters in (
                            ("charge_reference", state.operations_by_reference),
                            ("idempotency_key", state.operations_by_key),
                        )
                        for kind in _OPERATION_KINDS
                    },
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
            if self._journal is not None:
                self._journal.clear()

    # -- internals (call with the lock held) -----------------------------------------------

    def _new_state(self) -> _State:
        return _State(limit=self._limit, bucket_limit=self._bucket_limit)

    def _record_charge(
        self, account: str, key: str, charge: Charge, plan: Any, visible_at: datetime
    ) -> None:
        state = self._state
        entry = _ChargeEntry(account=account, charge=charge, plan=plan)
        state.lookup.add((account, charge.reference), entry, visible_at)
        state.ledger.append(account, key, entry)
        state.charges[(account, charge.id)] = entry
        while len(state.charges) > self._limit:
            state.charges.popitem(last=False)
            state.charges_evicted += 1
        state.charges_total += 1
        state.charges_by_reference.add(charge.reference)
        state.charges_by_key.add(key)

    def _record_operation(
        self,
        account: str,
        key: str,
        kind: OperationKind,
        charge: Charge,
        refund: Refund | None,
        visible_at: datetime,
    ) -> None:
        state = self._state
        entry = state.charges.get((account, charge.id))
        if entry is not None:  # None only when replaying a charge evicted since
            entry.charge = charge
        if refund is not None:
            state.refund_lookup.add((account, refund.reference), refund, visible_at)
            state.refund_ledger.append(account, key, refund)
        state.operations_total[kind] += 1
        state.operations_by_reference[kind].add(charge.reference)
        state.operations_by_key[kind].add(key)

    def _journal_append(
        self, entry_type: str, claim: Claim, record: _Record, visible_at: datetime, **data: Any
    ) -> None:
        if self._journal is None or record.response is None:
            return
        self._journal.append(
            {
                "type": entry_type,
                "account": claim.account,
                "key": claim.key,
                "fingerprint": record.fingerprint,
                "expires_at": record.expires_at.isoformat(),
                "visible_at": visible_at.isoformat(),
                "response": response_to_json(record.response),
                **data,
            }
        )

    def _replay(self, entry: dict[str, Any]) -> None:
        """Apply one journal entry, as ``commit``, ``commit_operation`` or ``charge_change``
        recorded it."""
        if entry["type"] == "charge_change":
            charge = charge_from_json(entry["charge"])
            changed = self._state.charges.get((entry["account"], charge.id))
            if changed is not None:  # None only when the charge was evicted since
                changed.charge = charge
            return
        account, key = entry["account"], entry["key"]
        state = self._state
        state.records.pop((account, key), None)  # a later entry of the key wins
        state.records[(account, key)] = _Record(
            fingerprint=entry["fingerprint"],
            expires_at=datetime.fromisoformat(entry["expires_at"]),
            claim_id=next(self._claim_ids),
            response=response_from_json(entry["response"]),
        )
        self._evict_records()
        visible_at = datetime.fromisoformat(entry["visible_at"])
        charge = charge_from_json(entry["charge"])
        if entry["type"] == "charge":
            self._record_charge(account, key, charge, None, visible_at)
        else:
            refund = None if entry["refund"] is None else refund_from_json(entry["refund"])
            self._record_operation(account, key, entry["kind"], charge, refund, visible_at)

    @staticmethod
    def _operation_stats(state: _State) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for kind in _OPERATION_KINDS:
            plural = _OPERATION_PLURALS[kind]
            result[f"{plural}_total"] = state.operations_total[kind]
            result[f"{plural}_by_charge_reference"] = dict(
                state.operations_by_reference[kind].items()
            )
            result[f"{plural}_by_idempotency_key"] = dict(state.operations_by_key[kind].items())
        return result

    def _entry(self, account: str, charge_id: str) -> _ChargeEntry:
        entry = self._state.charges.get((account, charge_id))
        if entry is None:
            raise OperationRefused(
                "charge_not_found", f"No charge {charge_id[:64]!r} for this API key.", status=404
            )
        return entry

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


def _page(
    rows: Any, account: str, since: datetime | None, starting_after: str | None, limit: int
) -> tuple[list[tuple[str, Any]], bool]:
    """One page of ``(account, key, item)`` rows (items with ``id`` and ``created_at``):
    ``account``'s items after the one with id ``starting_after`` (``KeyError`` if absent),
    with ``created_at >= since``, at most ``limit``; and whether more follow."""
    rows = iter(rows)
    if starting_after is not None:
        for row_account, _, item in rows:
            if row_account == account and item.id == starting_after:
                break
        else:
            raise KeyError(starting_after)
    page: list[tuple[str, Any]] = []
    for row_account, key, item in rows:
        if row_account != account or (since is not None and item.created_at < since):
            continue
        if len(page) == limit:
            return page, True
        page.append((key, item))
    return page, False

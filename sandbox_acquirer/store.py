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
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox_acquirer.models import Charge, StoredResponse

__all__ = [
    "DEFAULT_IDEMPOTENCY_RETENTION",
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


@dataclass(slots=True)
class _State:
    records: dict[tuple[str, str], _Record] = field(default_factory=dict)
    charges: list[Charge] = field(default_factory=list)
    charges_by_account_reference: dict[tuple[str, str], list[Charge]] = field(default_factory=dict)
    charges_by_reference: Counter[str] = field(default_factory=Counter)
    requests_by_status: Counter[int] = field(default_factory=Counter)


class SandboxStore:
    """The acquirer's ledger, idempotency records and request counters, thread-safe.

    ``clock`` returns aware UTC datetimes (``utc_now`` by default); it dates charges and
    decides expiry. ``idempotency_retention`` is how long a key is remembered after its
    first request.
    """

    def __init__(
        self,
        *,
        clock: Clock = utc_now,
        idempotency_retention: timedelta = DEFAULT_IDEMPOTENCY_RETENTION,
    ) -> None:
        if idempotency_retention <= timedelta(0):
            raise ValueError("idempotency_retention must be positive")
        self._clock = clock
        self._retention = idempotency_retention
        self._lock = threading.Lock()
        self._claim_ids = itertools.count(1)
        self._generation = 0
        self._state = _State()

    @property
    def idempotency_retention(self) -> timedelta:
        """How long a key is remembered after its first request."""
        return self._retention

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
            record = self._state.records.get((account, key))
            if record is not None and self._is_expired(record, now):
                del self._state.records[(account, key)]
                record = None
            if record is None:
                claim_id = next(self._claim_ids)
                self._state.records[(account, key)] = _Record(
                    fingerprint=fingerprint,
                    expires_at=now + self._retention,
                    claim_id=claim_id,
                )
                return Claimed(Claim(account, key, self._generation, claim_id))
            if record.response is None:
                return KeyInUse()
            if record.fingerprint != fingerprint:
                return KeyReused()
            return Replay(record.response)

    def commit(self, claim: Claim, charge: Charge, response: StoredResponse) -> bool:
        """Record ``charge`` and complete the claimed key with ``response``, atomically.

        From then on the key replays ``response``. Returns ``False`` (and records nothing)
        when the claim is stale: a ``reset()`` happened since it was made.
        """
        with self._lock:
            record = self._owned_record(claim)
            if record is None:
                return False
            record.response = response
            state = self._state
            state.charges.append(charge)
            state.charges_by_account_reference.setdefault(
                (claim.account, charge.reference), []
            ).append(charge)
            state.charges_by_reference[charge.reference] += 1
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

    # -- ledger and counters ------------------------------------------------------------

    def charges_for(self, account: str, reference: str) -> list[Charge]:
        """``account``'s charges with this merchant ``reference``, oldest first."""
        with self._lock:
            return list(self._state.charges_by_account_reference.get((account, reference), ()))

    def count_request(self, status: int, *, generation: int) -> None:
        """Count one answered request with HTTP ``status``.

        ``generation`` is ``self.generation`` read when the request arrived; a request that
        began before the last ``reset()`` is not counted.
        """
        with self._lock:
            if generation == self._generation:
                self._state.requests_by_status[status] += 1

    def stats(self) -> dict[str, Any]:
        """Counters since the last reset, JSON-ready.

        Shape: ``{"charges_total": int, "charges_by_reference": {reference: int},
        "requests_total": int, "requests_by_status": {"201": int, ...}}``.
        """
        with self._lock:
            state = self._state
            return {
                "charges_total": len(state.charges),
                "charges_by_reference": dict(state.charges_by_reference),
                "requests_total": sum(state.requests_by_status.values()),
                "requests_by_status": {
                    str(status): count for status, count in sorted(state.requests_by_status.items())
                },
            }

    def reset(self) -> None:
        """Forget every charge, idempotency record and counter; start a new generation."""
        with self._lock:
            self._generation += 1
            self._state = _State()

    # -- internals (call with the lock held) -----------------------------------------------

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

"""SandboxStore: idempotency records, retention with an injected clock, ledger, counters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sandbox_acquirer.models import Charge, StoredResponse
from sandbox_acquirer.store import (
    Claim,
    Claimed,
    KeyInUse,
    KeyReused,
    Replay,
    SandboxStore,
)

START = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)
CREATED = StoredResponse(status=201, body=b'{"id":"ch_1"}')
ORIGINAL_STATS = ("charges_total", "charges_by_reference", "requests_total", "requests_by_status")


class FakeClock:
    """A clock that stands still until a test moves it."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> SandboxStore:
    return SandboxStore(clock=clock)


def make_charge(charge_id: str = "ch_1", reference: str = "order-1") -> Charge:
    return Charge(
        id=charge_id,
        status="approved",
        decline_code=None,
        amount=1050,
        currency="EUR",
        reference=reference,
        created_at=START,
    )


def claim(store: SandboxStore, key: str = "key-1", account: str = "acct_1") -> Claim:
    outcome = store.begin(account, key, "print-1")
    assert isinstance(outcome, Claimed)
    return outcome.claim


def complete(
    store: SandboxStore, key: str = "key-1", account: str = "acct_1", charge_id: str = "ch_1"
) -> None:
    assert store.commit(claim(store, key, account), make_charge(charge_id), CREATED)


# -- idempotency ------------------------------------------------------------------------


def test_first_request_claims_the_key(store: SandboxStore) -> None:
    """An unknown key is claimed by the request that brings it."""
    assert isinstance(store.begin("acct_1", "key-1", "print-1"), Claimed)


def test_claimed_key_is_in_use_until_committed(store: SandboxStore) -> None:
    """While the first request runs, the same key is reported in use."""
    claim(store)

    assert store.begin("acct_1", "key-1", "print-1") == KeyInUse()


def test_committed_key_replays_the_stored_response(store: SandboxStore) -> None:
    """After commit, the same key and fingerprint replay the stored response."""
    complete(store)

    assert store.begin("acct_1", "key-1", "print-1") == Replay(CREATED)


def test_committed_key_with_other_fingerprint_is_reused(store: SandboxStore) -> None:
    """After commit, the same key with another fingerprint is a reuse."""
    complete(store)

    assert store.begin("acct_1", "key-1", "print-2") == KeyReused()


def test_keys_are_scoped_per_account(store: SandboxStore) -> None:
    """The same key under another account is a separate, free key."""
    complete(store, account="acct_1")

    assert isinstance(store.begin("acct_2", "key-1", "print-1"), Claimed)


def test_keys_are_case_sensitive(store: SandboxStore) -> None:
    """KEY-1 and key-1 are different keys."""
    complete(store, key="key-1")

    assert isinstance(store.begin("acct_1", "KEY-1", "print-1"), Claimed)


def test_released_key_is_free_again(store: SandboxStore) -> None:
    """A released claim leaves no record: the next request claims the key afresh."""
    store.release(claim(store))

    assert isinstance(store.begin("acct_1", "key-1", "print-2"), Claimed)
    assert store.stats()["charges_total"] == 0


def test_release_after_commit_keeps_the_record(store: SandboxStore) -> None:
    """Releasing a claim that was already committed changes nothing."""
    held = claim(store)
    store.commit(held, make_charge(), CREATED)

    store.release(held)

    assert store.begin("acct_1", "key-1", "print-1") == Replay(CREATED)


# -- retention --------------------------------------------------------------------------


def test_key_replays_just_before_retention_ends(store: SandboxStore, clock: FakeClock) -> None:
    """At 23:59:59 after the first request the key still replays."""
    complete(store)
    clock.advance(hours=23, minutes=59, seconds=59)

    assert store.begin("acct_1", "key-1", "print-1") == Replay(CREATED)


def test_key_is_forgotten_just_after_retention_ends(store: SandboxStore, clock: FakeClock) -> None:
    """At 24:00:01 after the first request the key is free, even with another body."""
    complete(store)
    clock.advance(hours=24, seconds=1)

    assert isinstance(store.begin("acct_1", "key-1", "print-2"), Claimed)


def test_retention_counts_from_the_first_request(store: SandboxStore, clock: FakeClock) -> None:
    """A replay does not extend the record's life."""
    complete(store)
    clock.advance(hours=20)
    store.begin("acct_1", "key-1", "print-1")
    clock.advance(hours=4, seconds=1)

    assert isinstance(store.begin("acct_1", "key-1", "print-1"), Claimed)


def test_retention_is_configurable(clock: FakeClock) -> None:
    """With a one-hour retention a key is forgotten after an hour."""
    store = SandboxStore(clock=clock, idempotency_retention=timedelta(hours=1))
    complete(store)
    clock.advance(hours=1, seconds=1)

    assert isinstance(store.begin("acct_1", "key-1", "print-1"), Claimed)


def test_key_in_progress_never_expires(store: SandboxStore, clock: FakeClock) -> None:
    """A key whose request is still running is in use however old it is."""
    claim(store)
    clock.advance(days=3)

    assert store.begin("acct_1", "key-1", "print-1") == KeyInUse()


def test_purge_removes_only_expired_records(store: SandboxStore, clock: FakeClock) -> None:
    """purge_expired deletes completed expired records, not fresh or in-progress ones."""
    complete(store, key="old")
    claim(store, key="running")
    clock.advance(hours=12)
    complete(store, key="fresh")
    clock.advance(hours=12, seconds=1)

    assert store.purge_expired() == 1
    assert store.begin("acct_1", "running", "print-1") == KeyInUse()
    assert store.begin("acct_1", "fresh", "print-1") == Replay(CREATED)


def test_non_positive_retention_is_refused(clock: FakeClock) -> None:
    """A retention of zero would make every key expire at once: refused."""
    with pytest.raises(ValueError, match="retention"):
        SandboxStore(clock=clock, idempotency_retention=timedelta(0))


# -- ledger, counters, reset ------------------------------------------------------------


def test_charges_for_lists_the_accounts_charges_oldest_first(store: SandboxStore) -> None:
    """charges_for returns one account's charges with a reference, in commit order."""
    complete(store, key="k1", charge_id="ch_1")
    complete(store, key="k2", charge_id="ch_2")
    complete(store, key="k3", account="acct_2", charge_id="ch_3")

    assert [charge.id for charge in store.charges_for("acct_1", "order-1")] == ["ch_1", "ch_2"]


def test_stats_count_charges_and_requests(store: SandboxStore) -> None:
    """stats() reports charges per reference and requests per status."""
    complete(store)
    store.count_request(201, generation=store.generation)
    store.count_request(201, generation=store.generation)
    store.count_request(400, generation=store.generation)

    stats = store.stats()
    assert {name: stats[name] for name in ORIGINAL_STATS} == {
        "charges_total": 1,
        "charges_by_reference": {"order-1": 1},
        "requests_total": 3,
        "requests_by_status": {"201": 2, "400": 1},
    }


def test_reset_forgets_charges_keys_and_counters(store: SandboxStore) -> None:
    """After reset the stats are empty and an old key is free."""
    complete(store)
    store.count_request(201, generation=store.generation)

    store.reset()

    assert store.stats()["charges_total"] == 0
    assert store.stats()["requests_total"] == 0
    assert store.charges_for("acct_1", "order-1") == []
    assert isinstance(store.begin("acct_1", "key-1", "print-1"), Claimed)


def test_claim_from_before_a_reset_records_nothing(store: SandboxStore) -> None:
    """A request that claimed its key before a reset cannot commit into the new state."""
    stale = claim(store)
    store.reset()

    assert store.commit(stale, make_charge(), CREATED) is False
    assert store.stats()["charges_total"] == 0
    assert isinstance(store.begin("acct_1", "key-1", "print-1"), Claimed)


def test_request_from_before_a_reset_is_not_counted(store: SandboxStore) -> None:
    """A request that began before a reset is left out of the new counters."""
    generation = store.generation
    store.reset()

    store.count_request(201, generation=generation)

    assert store.stats()["requests_total"] == 0


# -- attempts, lookup lag, extended counters ----------------------------------------------


def test_attempts_are_numbered_per_account_and_key(store: SandboxStore) -> None:
    """count_attempt numbers the attempts of one (account, key) from 1, independently."""
    numbers = [store.count_attempt("acct_1", "key-1") for _ in range(3)]

    assert numbers == [1, 2, 3]
    assert store.count_attempt("acct_1", "key-2") == 1
    assert store.count_attempt("acct_2", "key-1") == 1


def test_reset_restarts_attempt_numbers(store: SandboxStore) -> None:
    """After reset a key's attempts count from 1 again."""
    store.count_attempt("acct_1", "key-1")

    store.reset()

    assert store.count_attempt("acct_1", "key-1") == 1


def test_lagging_charge_is_hidden_until_its_lag_passes(
    store: SandboxStore, clock: FakeClock
) -> None:
    """A charge committed with visible_after=5 s is listed only from 5 s later on."""
    assert store.commit(claim(store), make_charge(), CREATED, visible_after=timedelta(seconds=5))
    clock.advance(seconds=4.999)
    hidden = store.charges_for("acct_1", "order-1")
    clock.advance(seconds=0.001)

    assert hidden == []
    assert [charge.id for charge in store.charges_for("acct_1", "order-1")] == ["ch_1"]


def test_lagging_charge_is_counted_at_once(store: SandboxStore) -> None:
    """Lookup lag hides a charge from GET /charges, not from the stats."""
    store.commit(claim(store), make_charge(), CREATED, visible_after=timedelta(seconds=60))

    assert store.stats()["charges_total"] == 1
    assert store.stats()["charges_by_idempotency_key"] == {"key-1": 1}


def test_unanswered_requests_are_counted_apart_from_statuses(store: SandboxStore) -> None:
    """A reset connection counts under requests_unanswered, not in requests_total."""
    store.count_request("reset", generation=store.generation, endpoint="POST /charges")
    store.count_request(201, generation=store.generation, endpoint="POST /charges")

    stats = store.stats()
    assert stats["requests_total"] == 1
    assert stats["requests_unanswered"] == {"reset": 1}
    assert stats["requests_by_endpoint"] == {"POST /charges": {"201": 1, "reset": 1, "total": 2}}


def test_arrivals_are_counted_per_100_ms_bucket(store: SandboxStore, clock: FakeClock) -> None:
    """Arrivals fall into buckets keyed by their start in epoch milliseconds."""
    store.count_arrival(generation=store.generation)
    clock.advance(milliseconds=99)
    store.count_arrival(generation=store.generation)
    clock.advance(milliseconds=1)
    store.count_arrival(generation=store.generation, idempotency_key="key-1")

    start_ms = int(START.timestamp() * 1000)
    assert store.stats()["arrivals_per_100ms"] == {str(start_ms): 2, str(start_ms + 100): 1}
    assert store.stats()["requests_by_idempotency_key"] == {"key-1": 1}


def test_arrival_from_before_a_reset_is_not_counted(store: SandboxStore) -> None:
    """An arrival stamped with an old generation is dropped."""
    generation = store.generation
    store.reset()

    store.count_arrival(generation=generation, idempotency_key="key-1")

    assert store.stats()["arrivals_per_100ms"] == {}
    assert store.stats()["requests_by_idempotency_key"] == {}


def test_connection_and_in_flight_gauges_survive_reset(store: SandboxStore) -> None:
    """open_connections and requests_in_flight are live values, not cleared by reset."""
    store.connection_opened()
    store.connection_opened()
    store.connection_closed()
    assert store.enter_request() == 1

    store.reset()

    assert store.stats()["open_connections"] == 1
    assert store.stats()["requests_in_flight"] == 1


# -- memory bounds -------------------------------------------------------------------------


def test_idempotency_records_beyond_the_bound_evict_the_oldest(clock: FakeClock) -> None:
    """With max_tracked_keys=2, a third completed key pushes out the first."""
    store = SandboxStore(clock=clock, max_tracked_keys=2)
    for index in range(3):
        complete(store, key=f"key-{index}", charge_id=f"ch_{index}")

    assert isinstance(store.begin("acct_1", "key-0", "print-1"), Claimed)
    assert store.begin("acct_1", "key-2", "print-1") == Replay(CREATED)
    assert store.stats()["evicted"]["idempotency_keys"] >= 1


def test_records_in_progress_are_never_evicted(clock: FakeClock) -> None:
    """A running request keeps its key even when the table is over its bound."""
    store = SandboxStore(clock=clock, max_tracked_keys=1)
    claim(store, key="running")
    complete(store, key="done-1")
    complete(store, key="done-2")

    assert store.begin("acct_1", "running", "print-1") == KeyInUse()


def test_ledger_beyond_the_bound_drops_the_oldest_charge(clock: FakeClock) -> None:
    """With max_tracked_keys=2 the lookup keeps the two newest charges; totals stay exact."""
    store = SandboxStore(clock=clock, max_tracked_keys=2)
    for index in range(3):
        complete(store, key=f"key-{index}", charge_id=f"ch_{index}")

    listed = [charge.id for charge in store.charges_for("acct_1", "order-1")]
    assert listed == ["ch_1", "ch_2"]
    assert store.stats()["charges_total"] == 3
    assert store.stats()["evicted"]["charges_for_lookup"] == 1


def test_per_key_counters_keep_at_most_the_bound(clock: FakeClock) -> None:
    """requests_by_idempotency_key keeps the newest max_tracked_keys keys."""
    store = SandboxStore(clock=clock, max_tracked_keys=2)
    for key in ("a", "b", "c"):
        store.count_arrival(generation=store.generation, idempotency_key=key)

    assert store.stats()["requests_by_idempotency_key"] == {"b": 1, "c": 1}
    assert store.stats()["evicted"]["requests_by_idempotency_key"] == 1


def test_arrival_buckets_keep_at_most_the_bound(clock: FakeClock) -> None:
    """With max_arrival_buckets=2 only the two newest buckets remain."""
    store = SandboxStore(clock=clock, max_arrival_buckets=2)
    for _ in range(3):
        store.count_arrival(generation=store.generation)
        clock.advance(milliseconds=100)

    assert len(store.stats()["arrivals_per_100ms"]) == 2
    assert store.stats()["evicted"]["arrivals_per_100ms"] == 1


def test_a_long_run_of_unique_keys_stays_within_the_bound(clock: FakeClock) -> None:
    """5 000 unique keys against a bound of 100 leave every table at 100 entries."""
    store = SandboxStore(clock=clock, max_tracked_keys=100)
    for index in range(5000):
        key = f"key-{index}"
        store.count_arrival(generation=store.generation, idempotency_key=key)
        store.count_attempt("acct_1", key)
        outcome = store.begin("acct_1", key, "print-1")
        assert isinstance(outcome, Claimed)
        store.commit(outcome.claim, make_charge(f"ch_{index}", reference=key), CREATED)

    stats = store.stats()
    assert stats["charges_total"] == 5000
    assert stats["idempotency_keys"] == 100
    assert len(stats["charges_by_reference"]) == 100
    assert len(stats["charges_by_idempotency_key"]) == 100
    assert len(stats["requests_by_idempotency_key"]) == 100
    assert stats["evicted"]["attempt_counters"] == 4900

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

    assert store.stats() == {
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

"""The sandbox's journal (``--data-dir``): what a store records is what a new store replays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sandbox_acquirer.journal import JOURNAL_NAME, Journal
from sandbox_acquirer.models import Charge, StoredResponse
from sandbox_acquirer.store import Claimed, Replay, SandboxStore

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _charge(charge_id: str) -> Charge:
    return Charge(
        id=charge_id, status="approved", decline_code=None, amount=1999, currency="EUR",
        reference="pay_1", created_at=NOW,
    )  # fmt: skip


def _store(tmp_path) -> SandboxStore:
    return SandboxStore(clock=lambda: NOW, journal=Journal(tmp_path))


def _commit(store: SandboxStore, key: str, charge_id: str) -> None:
    claimed = store.begin("acct", key, "print")
    assert isinstance(claimed, Claimed)
    assert store.commit(claimed.claim, _charge(charge_id), StoredResponse(201, b'{"id": 1}'))


def test_a_new_store_on_the_same_journal_replays_keys_and_charges(tmp_path):
    _commit(_store(tmp_path), "key-1", "ch_1")
    again = _store(tmp_path)
    assert again.begin("acct", "key-1", "print") == Replay(StoredResponse(201, b'{"id": 1}'))
    assert [charge.id for charge in again.charges_for("acct", "pay_1")] == ["ch_1"]
    assert again.stats()["charges_total"] == 1


def test_a_key_still_in_progress_is_not_kept(tmp_path):
    store = _store(tmp_path)
    assert isinstance(store.begin("acct", "key-1", "print"), Claimed)
    assert isinstance(_store(tmp_path).begin("acct", "key-1", "print"), Claimed)


def test_a_torn_last_line_is_dropped_and_the_next_entry_starts_clean(tmp_path):
    _commit(_store(tmp_path), "key-1", "ch_1")
    journal = tmp_path / JOURNAL_NAME
    journal.write_text(journal.read_text() + '{"type": "charge", "acc')
    store = _store(tmp_path)
    assert len(store.charges_for("acct", "pay_1")) == 1
    _commit(store, "key-2", "ch_2")
    assert [c.id for c in _store(tmp_path).charges_for("acct", "pay_1")] == ["ch_1", "ch_2"]


def test_expiry_still_applies_to_replayed_keys(tmp_path):
    _commit(_store(tmp_path), "key-1", "ch_1")
    later = SandboxStore(clock=lambda: NOW + timedelta(days=2), journal=Journal(tmp_path))
    assert isinstance(later.begin("acct", "key-1", "print"), Claimed)


def test_a_challenge_answered_is_replayed_after_a_restart(tmp_path):
    """A 3-D Secure challenge's outcome (``charge_change``) survives a restart."""
    store = _store(tmp_path)
    claimed = store.begin("acct", "key-3ds", "print")
    assert isinstance(claimed, Claimed)
    waiting = Charge(
        id="ch_3ds", status="requires_action", decline_code=None, amount=1999, currency="EUR",
        reference="pay_3ds", created_at=NOW, action_url="http://127.0.0.1/challenge/ch_3ds",
        return_url="https://shop.example/back",
    )  # fmt: skip
    assert store.commit(claimed.claim, waiting, StoredResponse(201, b'{"id": 3}'))
    store.charge_change("ch_3ds", lambda charge, now: charge.challenge_completed(True, now))
    (again,) = _store(tmp_path).charges_for("acct", "pay_3ds")
    assert (again.status, again.captured, again.amount_captured) == ("approved", True, 1999)

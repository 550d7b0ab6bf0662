"""The breaker actions as services: state before and after, the admin-history row, refusals."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User

from payments.acquirer.client import acquirer_client
from payments.acquirer.selectors import breaker_history
from payments.acquirer.services import (
    BreakerActionNotAudited,
    breaker_disable,
    breaker_force_open,
    breaker_reset,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", is_staff=True)


def test_force_open_returns_the_state_before_and_after(alice):
    """closed -> forced_open, for the group named only."""
    before, after = breaker_force_open("authorize", actor=alice, note="INC-1 acquirer down")
    assert (before.state, after.state) == ("closed", "forced_open")
    assert acquirer_client().breaker_state("lookup").state == "closed"


def test_each_action_writes_one_history_row_with_the_note(alice):
    """Who, which group, what changed and why: one CHANGE row per action, newest first."""
    breaker_disable("lookup", actor=alice, note="INC-2 false trips")
    breaker_reset("lookup", actor=alice, note="INC-2 fixed")
    newest, oldest = breaker_history()
    assert (newest.user, newest.action_flag, newest.object_id) == (alice, CHANGE, "lookup")
    assert "Reset circuit breaker sandbox/lookup: disabled -> closed" in newest.change_message
    assert newest.change_message.endswith("Note: INC-2 fixed")
    assert "closed -> disabled" in oldest.change_message


@pytest.mark.parametrize("note", ["", "  "])
def test_a_blank_note_is_refused_before_anything_changes(alice, note):
    """ValueError; the breaker and the history unchanged."""
    with pytest.raises(ValueError, match=r"^a breaker action needs a note$"):
        breaker_force_open("authorize", actor=alice, note=note)
    assert acquirer_client().breaker_state("authorize").state == "closed"
    assert not LogEntry.objects.exists()


def test_an_unknown_group_is_a_key_error(alice):
    """Only the client's endpoint groups have a breaker."""
    with pytest.raises(KeyError):
        breaker_reset("charges", actor=alice, note="x")


def test_an_action_the_history_cannot_record_is_applied_and_reported():
    """A history row the database refuses (an unsaved user: NULL user_id): the breaker is
    forced open all the same, and the error carries both states."""
    with pytest.raises(BreakerActionNotAudited) as raised:
        breaker_force_open("authorize", actor=User(username="ghost"), note="INC-3")
    assert (raised.value.before.state, raised.value.after.state) == ("closed", "forced_open")
    assert acquirer_client().breaker_state("authorize").state == "forced_open"
    assert not LogEntry.objects.exists()

"""The sandbox's notification sender (sandbox_acquirer/notifications.py): Standard Webhooks
signatures (checked by the ``standardwebhooks`` package), retries with backoff until a 2xx or
``max_attempts``, and the drop and duplicate faults. A fake ``post`` records each attempt; the
sender's own thread runs with millisecond backoffs. No socket, no subprocess."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks

from sandbox_acquirer.models import InvalidRequest
from sandbox_acquirer.notifications import NotificationTarget, Notifier
from tests.support.notifications import SANDBOX_SECRET

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CHARGE = {"id": "ch_1", "reference": "pay_1", "status": "approved"}


class Receiver:
    """A fake ``post``: answers each attempt with the next status of ``answers`` (the last one
    repeated), verifying every signature first."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, bytes]] = []
        self.done = threading.Event()

    def __call__(self, url, body, headers, timeout) -> int:
        standardwebhooks.Webhook(SANDBOX_SECRET).verify(body, dict(headers))
        self.seen.append((headers["webhook-id"], body))
        status = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if 200 <= status < 300:
            self.done.set()
        return status


def notifier(receiver: Receiver, **fields) -> Notifier:
    sender = Notifier(post=receiver)
    sender.configure(
        NotificationTarget(
            url="http://receiver.invalid/n",
            secrets=(SANDBOX_SECRET,),
            backoff_base=0.001,
            backoff_cap=0.005,
            **fields,
        )
    )
    return sender


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_failed_delivery_is_retried_with_the_same_id_until_a_2xx():
    receiver = Receiver(500, 503, 204)
    sender = notifier(receiver)
    try:
        sender.emit("charge.authorized", CHARGE, NOW)
        assert receiver.done.wait(5)
        wait_for(lambda: sender.stats()["delivered"] == 1)
        stats = sender.stats()
    finally:
        sender.stop()
    assert [msg_id for msg_id, _ in receiver.seen] == [receiver.seen[0][0]] * 3
    assert (stats["attempts"], stats["failed_attempts"], stats["delivered"]) == (3, 2, 1)
    assert b'"type":"charge.authorized"' in receiver.seen[0][1]


def test_after_max_attempts_it_is_given_up_and_counted():
    receiver = Receiver(500)
    sender = notifier(receiver, max_attempts=4)
    try:
        sender.emit("refund.succeeded", {"id": "re_1", "reference": "op_1"}, NOW)
        wait_for(lambda: sender.stats()["given_up"] == 1)
        stats = sender.stats()
    finally:
        sender.stop()
    assert (stats["attempts"], stats["given_up"], stats["delivered"]) == (4, 1, 0)


def test_drop_and_duplicate_faults():
    receiver = Receiver(204)
    sender = notifier(receiver, drop_rate=1.0)
    sender.emit("charge.authorized", CHARGE, NOW)
    assert sender.stats()["dropped"] == 1 and sender.stats()["pending"] == 0
    sender.configure(
        NotificationTarget(
            url="http://receiver.invalid/n", secrets=(SANDBOX_SECRET,), duplicate_rate=1.0
        )
    )
    try:
        sender.emit("charge.authorized", CHARGE, NOW)
        wait_for(lambda: sender.stats()["delivered"] == 2)
    finally:
        sender.stop()
    assert len(receiver.seen) == 2 and receiver.seen[0] == receiver.seen[1]


@pytest.mark.parametrize(
    "body",
    [
        None,
        {"url": "ftp://x", "secrets": [SANDBOX_SECRET]},
        {"url": "http://x", "secrets": []},
        {"url": "http://x", "secrets": ["not-a-secret"]},
        {"url": "http://x", "secrets": [SANDBOX_SECRET], "drop_rate": 2},
        {"url": "http://x", "secrets": [SANDBOX_SECRET], "max_attempts": True},
    ],
)
def test_a_bad_target_is_refused(body):
    with pytest.raises(InvalidRequest):
        NotificationTarget.from_json(body)


def test_the_target_shows_no_secret():
    target = NotificationTarget.from_json({"url": "http://x", "secrets": [SANDBOX_SECRET]})
    assert SANDBOX_SECRET not in repr(target) and SANDBOX_SECRET not in str(target.to_json())

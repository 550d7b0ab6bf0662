"""The ``acquirer_attempt`` event's data (``AcquirerAttempt.as_event_data``) is what
``dataclasses.asdict`` made of it before the shallow copy: the same keys, in the same order, with
the same values, for attempts with every field set or left out."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, fields

import pytest

from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome

#: A value for each optional field (None is the other choice).
SET = {
    "error": "UpstreamServerError",
    "acquirer_reference": "ch_123",
    "decline_code": "insufficient_funds",
    "replayed": False,
    "retry_after_seconds": 0,
    "wait_source": "retry-after",
    "amount": 1999,
    "code": "card_declined",
    "acquirer": "alpha",
    "action_url": "http://127.0.0.1:8090/challenge/ch_123",
}
LOG = ({"attempt": 1, "outcome": "approved", "elapsed": 1.5}, {"attempt": 2, "wait": None})


def reference(attempt: AcquirerAttempt) -> dict:
    """The former implementation: ``asdict()`` with the outcome's value, empty fields out."""
    data = asdict(attempt) | {"outcome": attempt.outcome.value,
                              "attempt_log": list(attempt.attempt_log)}  # fmt: skip
    return {name: value for name, value in data.items() if value is not None and value != []}


def attempts() -> list[AcquirerAttempt]:
    """Every outcome, with and without a status and a log, and each optional field set alone,
    all set, or none."""
    subsets = [{}, SET, *({name: value} for name, value in SET.items())]
    return [
        AcquirerAttempt(
            outcome=outcome,
            status_code=status,
            attempts=2,
            elapsed_seconds=0.125,
            attempt_log=log,
            **chosen,
        )
        for outcome, status, log, chosen in itertools.product(
            AuthorizationOutcome, (None, 201), ((), LOG), subsets
        )
    ]


@pytest.mark.parametrize("attempt", attempts(), ids=lambda a: f"{a.outcome.name}")
def test_event_data_equals_the_asdict_reference(attempt: AcquirerAttempt) -> None:
    data = attempt.as_event_data()
    expected = reference(attempt)
    assert list(data) == list(expected)
    assert json.dumps(data) == json.dumps(expected)


def test_every_field_is_covered() -> None:
    """A new field must be given a value above, so the comparison sees it set."""
    optional = {f.name for f in fields(AcquirerAttempt)} - {
        "outcome", "status_code", "attempts", "elapsed_seconds", "operation", "attempt_log"
    }  # fmt: skip
    assert optional == set(SET)

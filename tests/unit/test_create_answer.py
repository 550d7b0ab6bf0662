"""payments.api.responses.create_answer: every byte of the POST /payments answer, made in one
place."""

from __future__ import annotations

import pytest
from django.conf import settings

from payments.api.problems import Problem, problem_exception_handler
from payments.api.responses import create_answer
from payments.core.answers import Answered, StoredResponse, Unavailable

UNAVAILABLE = (
    "The acquirer could not be reached; the payment was not sent and nothing was charged. "
    "Retry later, with the same Idempotency-Key if you wish."
)


@pytest.mark.parametrize("retry_after", [7, None])
def test_unavailable_is_the_503_problem_the_handler_renders(retry_after):
    """The 503 is byte for byte the problem the exception handler renders for it, with the
    known wait or the configured default as Retry-After."""
    expected = problem_exception_handler(
        Problem(
            UNAVAILABLE,
            code="acquirer_unavailable",
            title="The acquirer is unavailable",
            status_code=503,
            retry_after=retry_after or settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS,
        ),
        {},
    )
    answer = create_answer(Unavailable(retry_after=retry_after))
    assert answer.status_code == expected.status_code == 503
    assert answer.content == expected.content
    assert dict(answer.items()) == dict(expected.items())


def test_answered_is_the_stored_answer():
    """An answered create sends the stored status, headers and body bytes unchanged."""
    stored = StoredResponse(202, {"Content-Type": "application/json", "Retry-After": "5"}, b"{}")
    answer = create_answer(Answered(payment=None, response=stored))
    assert (answer.status_code, answer.content, answer["Retry-After"]) == (202, b"{}", "5")

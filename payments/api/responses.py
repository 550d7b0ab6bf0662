"""The HTTP answers of ``POST /payments`` and of the operations after it, from what the flows
established (:data:`~payments.core.answers.CreateResult`): the stored answer, the 503 problem
when the payment was certainly not sent, or the replay of a completed key
(``idempotency.responses.replay_response``). The stored bytes are made in
:mod:`payments.core.answers`.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.http import HttpResponse

from idempotency.responses import replay_response
from payments.api.problems import problem_response
from payments.core.answers import CreateResult, Replayed, StoredResponse, Unavailable


def stored_http_response(stored: StoredResponse) -> HttpResponse:
    """``stored`` as an :class:`~django.http.HttpResponse`: its status, headers and body bytes."""
    response = HttpResponse(stored.body, status=stored.status_code)
    for name, value in stored.headers.items():
        response[name] = value
    return response


def unavailable_response(retry_after: float | None, *, what: str) -> HttpResponse:
    """The 503 problem ``acquirer_unavailable`` (RFC 9457) with ``Retry-After`` (RFC 9110
    section 10.2.3): the known wait in seconds, else ``PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS``.
    ``what``: the sentence saying what was not sent. Never stored."""
    wait = retry_after or settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS
    return problem_response(
        status_code=503,
        code="acquirer_unavailable",
        title="The acquirer is unavailable",
        detail=f"The acquirer could not be reached; {what}. "
        "Retry later, with the same Idempotency-Key if you wish.",
        headers={"Retry-After": str(max(0, math.ceil(wait)))},
    )


def create_answer(result: CreateResult) -> HttpResponse:
    """The HTTP answer to ``POST /payments`` for ``result``.

    :class:`Answered`: the stored answer. :class:`Replayed`: the key's stored answer with
    ``Idempotent-Replayed: true``. :class:`Unavailable`: a 503 problem ``acquirer_unavailable``
    (RFC 9457) with ``Retry-After`` (RFC 9110 section 10.2.3), the known wait in seconds or
    ``PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS``; never stored, so the key can be retried.
    """
    if isinstance(result, Replayed):
        return replay_response(result.record)
    if isinstance(result, Unavailable):
        return unavailable_response(
            result.retry_after, what="the payment was not sent and nothing was charged"
        )
    return stored_http_response(result.response)


def operation_answer(result: CreateResult) -> HttpResponse:
    """The HTTP answer to a capture, void or refund POST for ``result`` (the operation's
    services return the same three shapes as the create flow): the stored answer, the replay,
    or the 503 problem when the operation was certainly not sent (nothing changed)."""
    if isinstance(result, Unavailable):
        return unavailable_response(
            result.retry_after, what="the operation was not sent and nothing changed"
        )
    return create_answer(result)

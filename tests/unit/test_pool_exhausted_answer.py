"""An exhausted connection pool (psycopg_pool's ``PoolTimeout``, ADR 0048) answers ``503
service_unavailable`` with ``Retry-After: 1``, whether it reaches the API through Django's
error wrapper or as itself; any other database outage keeps ADR 0020's answer.
tests/e2e/test_connection_pool.py empties a real pool over HTTP."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError, connection
from psycopg import OperationalError as PsycopgOperationalError
from psycopg_pool import PoolTimeout

from payments.api.problems import problem_exception_handler


def raised_through_django(error: Exception) -> Exception:
    """``error`` as a request sees it: re-raised by Django's database error wrapper."""
    with pytest.raises(OperationalError) as caught, connection.wrap_database_errors:
        raise error
    return caught.value


@pytest.mark.parametrize("wrapped", [True, False], ids=["through Django", "as itself"])
def test_an_exhausted_pool_answers_503_with_retry_after_1(wrapped, settings):
    settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS = 10
    timeout = PoolTimeout("couldn't get a connection after 3.00 sec")
    exc = raised_through_django(timeout) if wrapped else timeout
    assert isinstance(exc, OperationalError if wrapped else PoolTimeout)
    response = problem_exception_handler(exc, {})
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["code"] == "service_unavailable"
    assert "database connection" in body["detail"]


def test_another_database_outage_keeps_its_own_retry_after(settings):
    settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS = 10
    exc = raised_through_django(PsycopgOperationalError("connection refused"))
    response = problem_exception_handler(exc, {})
    assert response.status_code == 503
    assert response["Retry-After"] == "10"
    assert "did not answer in time" in json.loads(response.content)["detail"]

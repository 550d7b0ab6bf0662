"""A real AcquirerClient (its retry loop, deadline, budget and breakers) whose network is a
script of answers (httpx.MockTransport), on a manual clock: the dialects' table tests.

    built, sent, slept = scripted_client(StripeDialect(), [first, ok], api_key="sk_test_...")
    built.authorize(request)
    sent     # the httpx.Request of every attempt, in order
    slept    # every wait, in seconds (random is 0.5: the backoff's first wait is 0.1 s)
"""

from __future__ import annotations

import httpx

from gateway_client import AcquirerClient, AcquirerConfig, Dialect, ManualClock, RetryPolicy

__all__ = ["scripted_client"]


def scripted_client(
    dialect: Dialect,
    answers: list[httpx.Response],
    *,
    base_url: str,
    api_key: str,
    honours_keys: bool = True,
) -> tuple[AcquirerClient, list[httpx.Request], list[float]]:
    """A client speaking `dialect` whose n-th request is answered `answers[n]`, with 2
    attempts within a 30 s deadline and server waits up to 10 s; returns it with the list of
    requests sent and the list of seconds slept."""
    sent: list[httpx.Request] = []
    slept: list[float] = []
    clock = ManualClock()

    def handler(http_request: httpx.Request) -> httpx.Response:
        sent.append(http_request)
        return answers[len(sent) - 1]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    config = AcquirerConfig(
        base_url=base_url, api_key=api_key, name=dialect.kind, honours_idempotency_keys=honours_keys
    )
    built = AcquirerClient(
        config,
        transport=httpx.MockTransport(handler),
        clock=clock,
        sleep=sleep,
        random=lambda: 0.5,
        dialect=dialect,
        policy=RetryPolicy(max_attempts=2, deadline=30, max_server_wait=10),
    )
    return built, sent, slept

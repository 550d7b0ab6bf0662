"""Routing a payment to the configured acquirers (``ACQUIRERS``; ADR 0023).

:func:`acquirer_route` gives, for a payment's ISO 4217 currency, capture method and payment
method, the acquirers that support all three (the payment method by its family, ADR 0051), in
routing order: the merchant's preferred names first (in its
order), then the others by priority. :func:`skip_reason` says whether an acquirer would refuse
a call without sending it (its ``authorize`` breaker open, its rate gate closed beyond the time
left, its retry budget empty), so a payment with somewhere else to go goes there at once.
:func:`may_fail_over` is the one rule of when a payment may leave an acquirer: only after an
attempt that certainly did not apply it (the gateway's "not applied" classification), or a
decline code configured as soft (``ACQUIRER_SOFT_DECLINE_CODES``). Nothing here writes to the
database or sends anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from acquirers.specs import payment_method_family
from gateway_client import AcquirerClient
from payments.acquirer.client import acquirer_specs
from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome

__all__ = [
    "acquirer_idempotency_key",
    "acquirer_route",
    "charged_anywhere",
    "may_fail_over",
    "skip_reason",
]


def acquirer_route(
    *, currency: str, capture_method: str, payment_method: str, preferred: Sequence[str] = ()
) -> tuple[str, ...]:
    """The names of the acquirers that take a payment in ``currency`` (ISO 4217) with
    ``capture_method`` (``automatic``/``manual``) and can charge ``payment_method`` (the API's
    token: its family, ``acquirers.specs.payment_method_family``, among the acquirer's), in
    the order to try them: the names of ``preferred`` (a merchant's ``acquirer_order``) that
    qualify, in that order, then the rest by priority. Empty when no configured acquirer takes
    it (:func:`charged_anywhere` tells whether the payment method alone is the reason).
    Unknown preferred names are ignored (an acquirer removed from the configuration). Reads
    the settings only: no database, no store."""
    family = payment_method_family(payment_method) or ""
    eligible = [
        spec.name for spec in acquirer_specs() if spec.supports(currency, capture_method, family)
    ]
    first = [name for name in dict.fromkeys(preferred) if name in eligible]
    return (*first, *(name for name in eligible if name not in first))


def charged_anywhere(payment_method: str) -> bool:
    """Whether any configured acquirer can charge ``payment_method`` (the API's token), whatever
    the currency and capture method: False makes an empty route the payment method's fault."""
    family = payment_method_family(payment_method)
    return any(family in spec.payment_method_families for spec in acquirer_specs())


def skip_reason(client: AcquirerClient, *, time_left: float, last: bool) -> str | None:
    """Why ``client``'s acquirer should not be tried now, or None to try it. Reads shared state
    only (no permit taken, nothing sent).

    ``circuit_open``: its ``authorize`` breaker refuses calls (the gateway would raise
    ``CircuitOpenError`` without sending). For an acquirer that is not the ``last`` candidate
    also ``rate_gate``: its rate gate stays closed longer than ``time_left`` (seconds) or the
    longest server wait it accepts; and ``retry_budget``: its retry budget is empty (it is
    failing and shedding retries). The last candidate is tried anyway: the gateway's own
    refusals (``RateLimitedError``, not sent) then apply, exactly as with one acquirer.
    """
    if not client.admits("authorize").allowed:
        return "circuit_open"
    if last:
        return None
    gate_wait = client.gate.remaining(client.scope)
    if gate_wait > 0 and gate_wait > min(time_left, client.policy.max_server_wait):
        return "rate_gate"
    if client.budget.state().retries_available <= 0:
        return "retry_budget"
    return None


def may_fail_over(attempt: AcquirerAttempt) -> bool:
    """Whether a payment may move on after ``attempt`` (the first and only attempts of a new
    payment at this acquirer): its outcome certainly did not apply it (not sent, the breaker
    open), or it is a decline whose code is in ``ACQUIRER_SOFT_DECLINE_CODES``. Never after an
    unknown outcome (it may have been applied: it stays and is reconciled there), an approval,
    a hard decline or a refusal of our request."""
    if attempt.outcome.not_applied:
        return True
    return (
        attempt.outcome is AuthorizationOutcome.DECLINED
        and attempt.decline_code is not None
        and attempt.decline_code in settings.ACQUIRER_SOFT_DECLINE_CODES
    )


def acquirer_idempotency_key(payment_id: str, acquirer: str, *, first: bool) -> str:
    """The acquirer idempotency key of ``payment_id``'s authorization at ``acquirer``:
    ``authorize-<payment id>`` at the first acquirer it is sent to (as before routing existed),
    ``authorize-<payment id>-<acquirer>`` at each one it fails over to. At most 63 characters
    (payment ids are 28, acquirer names at most 24)."""
    return f"authorize-{payment_id}" if first else f"authorize-{payment_id}-{acquirer}"

"""What one call to the acquirer established, as plain values: :class:`AuthorizationOutcome`
and :class:`AcquirerAttempt` (stored as the ``acquirer_attempt`` event). The state machine
records them; :mod:`payments.acquirer` makes them. Nothing here calls the acquirer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class AuthorizationOutcome(enum.Enum):
    """What one authorization attempt established. The operations after it (capture, void,
    refund: ``payments.acquirer.operations``) use the same values: ``APPROVED`` is "applied",
    ``DECLINED`` a refund the acquirer recorded as failed."""

    APPROVED = "approved"  #: the acquirer authorized it.
    DECLINED = "declined"  #: the acquirer declined it (a result, not an error).
    UNKNOWN = "unknown"  #: the acquirer may have applied it: stays processing, reconcile.
    NOT_SENT = "not_sent"  #: certainly not applied: failed, key released.
    CIRCUIT_OPEN = "circuit_open"  #: refused by the open breaker, nothing sent: key released.
    REJECTED = "rejected"  #: the acquirer refused our request (permanent): failed.
    #: The acquirer holds the authorization for the shopper (3-D Secure): ``requires_action``
    #: with the page the shopper is sent to (ADR 0049). Applied, not final.
    ACTION_REQUIRED = "action_required"
    #: A capture, void or refund the acquirer accepted without its outcome (Adyen's
    #: ``received``): the operation stays pending until the outcome is known (a notification,
    #: or a person after reconciliation's maximum age). Never "applied".
    PENDING = "pending"

    @property
    def not_applied(self) -> bool:
        """True when this attempt certainly did not reach the acquirer's books."""
        return self in (AuthorizationOutcome.NOT_SENT, AuthorizationOutcome.CIRCUIT_OPEN)


@dataclass(frozen=True, slots=True)
class AcquirerAttempt:
    """One call to the acquirer's authorize, classified. Stored as the ``acquirer_attempt``
    event's data by :meth:`as_event_data` (classified values only: no headers, no secrets).

    ``status_code``: the acquirer's HTTP status (201 for an answer; None when nothing came
    back). ``attempts``: requests the client sent (its retries included). ``elapsed_seconds``:
    wall time of the whole call, rounded to milliseconds. ``error``: the gateway error's class
    name, when the call raised. ``acquirer_reference``, ``decline_code``, ``replayed``: from the
    acquirer's answer. ``retry_after_seconds``: the acquirer's (or the rate gate's) full wait,
    in whole seconds rounded up, with ``wait_source`` saying where it came from
    (``retry-after``, ``quota-header`` or ``gate``). ``amount``: for a capture or refund, the
    amount (minor units) the acquirer applied. ``code``: the acquirer's refusal code (a
    permanent error's), when it gave one. ``acquirer``: the name of the acquirer the call went
    to (``ACQUIRERS``; every attempt records it). ``action_url``: the page where the shopper
    authenticates, for an ``action_required`` outcome. ``attempt_log``: each step of the
    call, in order
    (:func:`attempt_log_data` of the gateway's ``AttemptRecord``s: start, elapsed, status,
    outcome, error class, decision and stop reason, the chosen wait and its source, the retry
    budget, the rate gate and the breaker state), shown as rows on the payment's page.
    """

    outcome: AuthorizationOutcome
    status_code: int | None
    attempts: int
    elapsed_seconds: float
    operation: str = "authorize"
    error: str | None = None
    acquirer_reference: str | None = None
    decline_code: str | None = None
    replayed: bool | None = None
    retry_after_seconds: int | None = None
    wait_source: str | None = None
    amount: int | None = None
    code: str | None = None
    attempt_log: tuple[dict, ...] = ()
    acquirer: str | None = None
    #: The acquirer's page where the shopper authenticates (an ``action_required`` outcome).
    action_url: str | None = None

    def as_event_data(self) -> dict:
        """The JSON stored in the event: every field, the outcome as its value and the attempt
        log as a list, fields that do not apply (None, or no attempt log) left out. Each field
        is plain data, so a shallow copy serves: ``asdict()`` deep-copied every attempt
        record's dict (33 us a call against 1 us, measured here)."""
        data: dict = {}
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if value is not None and value != ():
                data[name] = value
        data["outcome"] = self.outcome.value
        if self.attempt_log:
            data["attempt_log"] = list(self.attempt_log)
        return data

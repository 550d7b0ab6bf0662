"""What the sandbox acquirer does for a ``payment_method`` token.

A test picks the acquirer's behaviour through the token it charges, as with a real
acquirer's test cards. ``resolve_scenario`` turns a token into a ``Scenario``, a plain value
that ``app`` carries out in these steps::

    count the attempt for (API key, Idempotency-Key)         attempt = 1, 2, 3, ...
      -> attempt <= fail_attempts: answer `failure`, record nothing, claim nothing
    claim the idempotency key
      -> wait hold_key_seconds            (the key is "in progress": same key gets 409)
      -> record the charge (visible to GET /charges after lookup_lag_seconds),
         complete the key with its 201 response
      -> wait reply_delay_seconds         (the key already replays: same key gets 201)
      -> reply: the charge (201, trickled if trickle_seconds_per_byte), a 500 problem,
         or a reset/closed connection (the charge stays recorded in the last three)

Attempts are counted per acquirer idempotency key, so the retry sequence of one payment is
deterministic whatever else is going on. A replay (the key completed earlier) never waits,
never fails and never trickles.

Tokens (details and examples in docs/sandbox.md):

=================================  ===========================================================
``tok_visa``, any other            approved
``tok_decline``                    declined, ``do_not_honor``
``tok_insufficient_funds``         declined, ``insufficient_funds``
``tok_issuer_unavailable``         declined, ``issuer_unavailable`` (a soft decline)
``tok_3ds_challenge``              3-D Secure: with a ``return_url``, ``requires_action`` and a
                                   ``next_action`` to the sandbox's challenge page (Approve:
                                   approved; Deny: declined ``authentication_failed``; a void
                                   first: canceled); without one, declined
                                   ``shopper_action_required``
``tok_slow_<ms>``                  approved after ``<ms>`` ms (0..60000), key in progress meanwhile
``tok_timeout_after_commit``       approved and recorded, reply after ``hang_seconds``
``tok_500_after_commit``           approved and recorded, reply is a 500
``tok_fail_<status>_<n>``          first ``n`` attempts answer ``<status>`` (400, 401, 403, 404,
                                   409, 422, 429, 500, 502, 503, 504), nothing recorded; then normal
``tok_ratelimit_<s>``              first attempt 429 with ``Retry-After: <s>``; then normal
``tok_ratelimit_date_<s>``         the same with ``Retry-After`` as an IMF-fixdate ``<s>`` ahead
``tok_reset_before_commit``        every attempt: connection reset, no answer, nothing recorded
``tok_close_before_commit``        every attempt: connection closed (FIN), no answer, no record
``tok_reset_after_commit``         approved and recorded, then connection reset; a retry replays
``tok_close_after_commit``         approved and recorded, then connection closed; a retry replays
``tok_trickle``                    approved and recorded, body sent one byte per
                                   ``trickle_seconds_per_byte`` (1 s by default)
``tok_trickle_<ms>``               the same at one byte per ``<ms>`` ms (0..10000)
``tok_lookup_lag_<s>``             approved and recorded, but ``GET /charges?reference=`` lists it
                                   only ``<s>`` seconds later (0..86400)
``tok_<operation>_<fault>``        authorization approved; ``<fault>`` (any token above without
                                   ``tok_``) in each capture, void or refund (see below)
=================================  ===========================================================

A malformed parameterised token (``tok_slow_soon``, ``tok_fail_418_1``) is a 400, so a typo
never passes silently as an approval.

Per-operation faults: a token may carry one segment per later operation of the charge,
``capture_<fault>``, ``void_<fault>`` and ``refund_<fault>``, where ``<fault>`` is any token
above without its ``tok_`` (``tok_capture_timeout_after_commit``,
``tok_fail_503_1__refund_reset_after_commit``). Segments are joined with ``__``; the part
before the first operation segment is the authorization's (empty: approved). Each operation
gets only its own segment, so a ``tok_timeout_after_commit`` charge's capture does not time
out; an operation without a segment runs plainly. ``resolve_token`` returns the whole
``TokenPlan``; ``resolve_scenario`` only the authorization's scenario. On an operation,
``decline`` and ``insufficient_funds`` are allowed for refunds only (the refund is recorded
``failed``), ``lookup_lag_<s>`` for refunds only (``GET /refunds`` lags), and an unknown
fault name is a 400 (``tok_capture_timout_after_commit`` is a typo, not an approval).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sandbox_acquirer.faults import FAULT_STATUSES, Fault
from sandbox_acquirer.models import ChargeStatus, InvalidRequest

__all__ = [
    "ALWAYS",
    "DEFAULT_HANG_SECONDS",
    "DEFAULT_TRICKLE_SECONDS_PER_BYTE",
    "MAX_FAIL_ATTEMPTS",
    "MAX_LAG_SECONDS",
    "MAX_RETRY_AFTER_SECONDS",
    "MAX_SLOW_MILLISECONDS",
    "MAX_TRICKLE_MILLISECONDS",
    "OPERATIONS",
    "Operation",
    "Reply",
    "Scenario",
    "ScenarioSettings",
    "TokenPlan",
    "resolve_scenario",
    "resolve_token",
]

#: Default delay of ``tok_timeout_after_commit``, in seconds.
DEFAULT_HANG_SECONDS = 30.0
#: Default pace of ``tok_trickle``: one byte per second.
DEFAULT_TRICKLE_SECONDS_PER_BYTE = 1.0

#: Largest ``<ms>`` accepted in ``tok_slow_<ms>``.
MAX_SLOW_MILLISECONDS = 60_000
#: Largest ``<n>`` accepted in ``tok_fail_<status>_<n>``.
MAX_FAIL_ATTEMPTS = 1000
#: Largest ``<s>`` accepted in ``tok_ratelimit_<s>`` and ``tok_ratelimit_date_<s>``.
MAX_RETRY_AFTER_SECONDS = 86_400
#: Largest ``<s>`` accepted in ``tok_lookup_lag_<s>``.
MAX_LAG_SECONDS = 86_400
#: Largest ``<ms>`` accepted in ``tok_trickle_<ms>``.
MAX_TRICKLE_MILLISECONDS = 10_000
#: ``fail_attempts`` meaning "every attempt".
ALWAYS = sys.maxsize

#: What the first attempt is answered with once the charge is recorded.
Reply = Literal["charge", "server_error", "reset", "close"]

#: The operations on a recorded charge that a token can inject faults into.
Operation = Literal["capture", "void", "refund"]
OPERATIONS: tuple[Operation, ...] = ("capture", "void", "refund")


@dataclass(frozen=True, slots=True)
class ScenarioSettings:
    """Process-wide knobs of the scenarios (from the command line).

    ``hang_seconds``: how long ``tok_timeout_after_commit`` waits before replying.
    ``trickle_seconds_per_byte``: the pace of ``tok_trickle``.
    """

    hang_seconds: float = DEFAULT_HANG_SECONDS
    trickle_seconds_per_byte: float = DEFAULT_TRICKLE_SECONDS_PER_BYTE


@dataclass(frozen=True, slots=True)
class Scenario:
    """How one charge attempt plays out (see the module docstring for the steps).

    ``status`` and ``decline_code`` are the recorded result; ``fail_attempts`` attempts per
    idempotency key get ``failure`` before anything is claimed or recorded (``ALWAYS``: every
    attempt); ``hold_key_seconds`` is spent before the charge is recorded,
    ``reply_delay_seconds`` after it; ``reply`` is what the first successful attempt
    receives; ``trickle_seconds_per_byte`` paces its body; ``lookup_lag_seconds`` hides the
    charge from ``GET /charges`` for that long; ``challenge`` holds it for the shopper.
    Replays never wait and always receive the charge at once.
    """

    status: ChargeStatus = "approved"
    decline_code: str | None = None
    hold_key_seconds: float = 0.0
    reply_delay_seconds: float = 0.0
    reply: Reply = "charge"
    fail_attempts: int = 0
    failure: Fault | None = None
    trickle_seconds_per_byte: float = 0.0
    lookup_lag_seconds: float = 0.0
    #: The issuer asks for the shopper (3-D Secure): ``requires_action`` with a challenge
    #: page when the request carries a ``return_url``, else declined
    #: ``shopper_action_required``.
    challenge: bool = False


_APPROVED = Scenario()

_FIXED: dict[str, Callable[[ScenarioSettings], Scenario]] = {
    "tok_visa": lambda _: _APPROVED,
    "tok_decline": lambda _: Scenario(status="declined", decline_code="do_not_honor"),
    "tok_insufficient_funds": lambda _: Scenario(
        status="declined", decline_code="insufficient_funds"
    ),
    "tok_issuer_unavailable": lambda _: Scenario(
        status="declined", decline_code="issuer_unavailable"
    ),
    "tok_3ds_challenge": lambda _: Scenario(challenge=True),
    "tok_timeout_after_commit": lambda settings: Scenario(
        reply_delay_seconds=settings.hang_seconds
    ),
    "tok_500_after_commit": lambda _: Scenario(reply="server_error"),
    "tok_reset_before_commit": lambda _: Scenario(
        fail_attempts=ALWAYS, failure=Fault(kind="reset", reason="tok_reset_before_commit")
    ),
    "tok_close_before_commit": lambda _: Scenario(
        fail_attempts=ALWAYS, failure=Fault(kind="close", reason="tok_close_before_commit")
    ),
    "tok_reset_after_commit": lambda _: Scenario(reply="reset"),
    "tok_close_after_commit": lambda _: Scenario(reply="close"),
    "tok_trickle": lambda settings: Scenario(
        trickle_seconds_per_byte=settings.trickle_seconds_per_byte
    ),
}


def _whole(argument: str, low: int, high: int, usage: str) -> int:
    """``argument`` as a plain decimal integer in ``[low, high]``, else ``InvalidRequest``."""
    if not (argument.isascii() and argument.isdigit()) or len(argument) > 12:
        raise InvalidRequest(usage)
    value = int(argument)
    if not low <= value <= high:
        raise InvalidRequest(usage)
    return value


def _slow(argument: str, _: ScenarioSettings) -> Scenario:
    milliseconds = _whole(
        argument,
        0,
        MAX_SLOW_MILLISECONDS,
        f"tok_slow_<ms> takes a whole number of milliseconds from 0 to {MAX_SLOW_MILLISECONDS}.",
    )
    return Scenario(hold_key_seconds=milliseconds / 1000)


_FAIL_USAGE = (
    "tok_fail_<status>_<n> takes a status among "
    + ", ".join(str(status) for status in FAULT_STATUSES)
    + f" and a number of attempts from 0 to {MAX_FAIL_ATTEMPTS}, e.g. tok_fail_503_2."
)


def _fail(argument: str, _: ScenarioSettings) -> Scenario:
    status_text, separator, count_text = argument.partition("_")
    if not separator:
        raise InvalidRequest(_FAIL_USAGE)
    status = _whole(status_text, 100, 599, _FAIL_USAGE)
    if status not in FAULT_STATUSES:
        raise InvalidRequest(_FAIL_USAGE)
    attempts = _whole(count_text, 0, MAX_FAIL_ATTEMPTS, _FAIL_USAGE)
    return Scenario(
        fail_attempts=attempts, failure=Fault(kind="status", status=status, reason="tok_fail")
    )


def _ratelimit(argument: str, _: ScenarioSettings, *, fmt: Literal["seconds", "date"]) -> Scenario:
    name = "tok_ratelimit_date_<s>" if fmt == "date" else "tok_ratelimit_<s>"
    seconds = _whole(
        argument,
        0,
        MAX_RETRY_AFTER_SECONDS,
        f"{name} takes a whole number of seconds from 0 to {MAX_RETRY_AFTER_SECONDS}.",
    )
    return Scenario(
        fail_attempts=1,
        failure=Fault(
            kind="status",
            status=429,
            retry_after_seconds=seconds,
            retry_after_format=fmt,
            reason="tok_ratelimit",
        ),
    )


def _trickle(argument: str, _: ScenarioSettings) -> Scenario:
    milliseconds = _whole(
        argument,
        0,
        MAX_TRICKLE_MILLISECONDS,
        "tok_trickle_<ms> takes a whole number of milliseconds per byte from 0 to "
        f"{MAX_TRICKLE_MILLISECONDS}.",
    )
    return Scenario(trickle_seconds_per_byte=milliseconds / 1000)


def _lookup_lag(argument: str, _: ScenarioSettings) -> Scenario:
    seconds = _whole(
        argument,
        0,
        MAX_LAG_SECONDS,
        f"tok_lookup_lag_<s> takes a whole number of seconds from 0 to {MAX_LAG_SECONDS}.",
    )
    return Scenario(lookup_lag_seconds=float(seconds))


#: Token prefix -> rule given the rest of the token. Longer prefixes are tried first, so
#: ``tok_ratelimit_date_`` wins over ``tok_ratelimit_``.
_PREFIXES: dict[str, Callable[[str, ScenarioSettings], Scenario]] = {
    "tok_slow_": _slow,
    "tok_fail_": _fail,
    "tok_ratelimit_date_": lambda argument, settings: _ratelimit(argument, settings, fmt="date"),
    "tok_ratelimit_": lambda argument, settings: _ratelimit(argument, settings, fmt="seconds"),
    "tok_trickle_": _trickle,
    "tok_lookup_lag_": _lookup_lag,
}
_PREFIX_ORDER = sorted(_PREFIXES, key=len, reverse=True)


@dataclass(frozen=True, slots=True)
class TokenPlan:
    """Everything a token asks for: the authorization's ``Scenario`` and, per operation
    named in the token, that operation's (``operation(name)`` gives a plain approval for
    the others)."""

    authorization: Scenario = _APPROVED
    operations: Mapping[str, Scenario] = field(default_factory=dict)

    def operation(self, name: Operation) -> Scenario:
        """The scenario of one ``capture``, ``void`` or ``refund`` of the charge."""
        return self.operations.get(name, _APPROVED)


#: Where an operation segment starts: ``__capture_``, ``__void_``, ``__refund_``.
_SEGMENT = re.compile(r"__(?=(?:capture|void|refund)_)")
_PLAIN_PLAN = TokenPlan()


def resolve_scenario(payment_method: str, settings: ScenarioSettings) -> Scenario:
    """The authorization's scenario for a ``tok_...`` token; unknown tokens are approved.

    Raises ``InvalidRequest`` for a malformed parameterised token (``tok_slow_abc``,
    ``tok_fail_418_1``) or operation segment, so the client gets a 400 instead of a
    surprising approval.
    """
    return resolve_token(payment_method, settings).authorization


def resolve_token(payment_method: str, settings: ScenarioSettings) -> TokenPlan:
    """The ``TokenPlan`` of a ``tok_...`` token (see the module docstring's per-operation
    faults); raises ``InvalidRequest`` as ``resolve_scenario`` does, and for a repeated or
    unknown operation segment."""
    fixed = _FIXED.get(payment_method)
    if fixed is not None:  # the common case: one plain token
        return TokenPlan(authorization=fixed(settings))
    rest = payment_method[len("tok_") :]
    pieces = _SEGMENT.split(rest)
    if not any(pieces[0].startswith(f"{name}_") for name in OPERATIONS):
        authorization = _single("tok_" + pieces.pop(0), settings)
    else:
        authorization = _APPROVED
    operations: dict[str, Scenario] = {}
    for piece in pieces:
        name, _, fault = piece.partition("_")
        if name in operations:
            raise InvalidRequest(f"The token names the {name} fault twice.")
        operations[name] = _operation_scenario(name, "tok_" + fault, settings)  # type: ignore[arg-type]
    if not operations and authorization is _APPROVED:
        return _PLAIN_PLAN
    return TokenPlan(authorization=authorization, operations=operations)


def _single(token: str, settings: ScenarioSettings) -> Scenario:
    fixed = _FIXED.get(token)
    if fixed is not None:
        return fixed(settings)
    for prefix in _PREFIX_ORDER:
        if token.startswith(prefix):
            return _PREFIXES[prefix](token[len(prefix) :], settings)
    return _APPROVED


def _operation_scenario(name: Operation, token: str, settings: ScenarioSettings) -> Scenario:
    usage = (
        f"{name}_<fault> takes a fault of the token table without its tok_, "
        f"e.g. tok_{name}_timeout_after_commit or tok_{name}_fail_503_2."
    )
    if token not in _FIXED and not any(token.startswith(prefix) for prefix in _PREFIXES):
        raise InvalidRequest(usage)
    scenario = _single(token, settings)
    if name != "refund" and (scenario.status == "declined" or scenario.lookup_lag_seconds):
        raise InvalidRequest(
            f"{name}_ takes no decline or lookup lag (only a refund can fail or lag)."
        )
    return scenario

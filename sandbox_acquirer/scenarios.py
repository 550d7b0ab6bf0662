"""What the sandbox acquirer does for a ``payment_method`` token.

A test picks the acquirer's behaviour through the token it charges, as with a real
acquirer's test cards. ``resolve_scenario`` turns a token into a ``Scenario``, a plain value
that ``app`` carries out in three steps::

    claim the idempotency key
      -> wait hold_key_seconds            (the key is "in progress": same key gets 409)
      -> record the charge, complete the key with its 201 response
      -> wait reply_delay_seconds         (the key already replays: same key gets 201)
      -> reply: the charge (201), or a 500 problem (the charge stays recorded)

Tokens:

=============================  ==================================================
``tok_visa``, any other        approved
``tok_decline``                declined, ``do_not_honor``
``tok_insufficient_funds``     declined, ``insufficient_funds``
``tok_slow_<ms>``              approved after ``<ms>`` milliseconds (0..60000),
                               holding the key in progress meanwhile
``tok_timeout_after_commit``   approved and recorded, reply sent after
                               ``hang_seconds`` (CLI ``--hang-seconds``, 30 s)
``tok_500_after_commit``       approved and recorded, reply is a 500
=============================  ==================================================

To add a behaviour, add an entry to ``_FIXED`` or a prefix rule to ``_PREFIXES``; if it needs
a new step (say, failing before the commit, or per-key attempt counters for tokens such as
``tok_fail_503_2``), add a field to ``Scenario`` and carry it out in ``app``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sandbox_acquirer.models import ChargeStatus, InvalidRequest

__all__ = [
    "DEFAULT_HANG_SECONDS",
    "MAX_SLOW_MILLISECONDS",
    "Reply",
    "Scenario",
    "ScenarioSettings",
    "resolve_scenario",
]

#: Default delay of ``tok_timeout_after_commit``, in seconds.
DEFAULT_HANG_SECONDS = 30.0

#: Largest ``<ms>`` accepted in ``tok_slow_<ms>``.
MAX_SLOW_MILLISECONDS = 60_000

#: What the first attempt is answered with once the charge is recorded.
Reply = Literal["charge", "server_error"]


@dataclass(frozen=True, slots=True)
class ScenarioSettings:
    """Process-wide knobs of the scenarios (from the command line).

    ``hang_seconds``: how long ``tok_timeout_after_commit`` waits before replying.
    """

    hang_seconds: float = DEFAULT_HANG_SECONDS


@dataclass(frozen=True, slots=True)
class Scenario:
    """How one charge attempt plays out (see the module docstring for the steps).

    ``status`` and ``decline_code`` are the recorded result; ``hold_key_seconds`` is spent
    before the charge is recorded, ``reply_delay_seconds`` after it; ``reply`` is what the
    first attempt receives. Replays never wait and always receive the charge.
    """

    status: ChargeStatus = "approved"
    decline_code: str | None = None
    hold_key_seconds: float = 0.0
    reply_delay_seconds: float = 0.0
    reply: Reply = "charge"


_APPROVED = Scenario()

_FIXED: dict[str, Callable[[ScenarioSettings], Scenario]] = {
    "tok_visa": lambda _: _APPROVED,
    "tok_decline": lambda _: Scenario(status="declined", decline_code="do_not_honor"),
    "tok_insufficient_funds": lambda _: Scenario(
        status="declined", decline_code="insufficient_funds"
    ),
    "tok_timeout_after_commit": lambda settings: Scenario(
        reply_delay_seconds=settings.hang_seconds
    ),
    "tok_500_after_commit": lambda _: Scenario(reply="server_error"),
}


def _slow(argument: str, _: ScenarioSettings) -> Scenario:
    if not (argument.isascii() and argument.isdigit()) or int(argument) > MAX_SLOW_MILLISECONDS:
        raise InvalidRequest(
            f"tok_slow_<ms> takes a whole number of milliseconds from 0 to {MAX_SLOW_MILLISECONDS}."
        )
    return Scenario(hold_key_seconds=int(argument) / 1000)


#: Token prefix -> rule given the rest of the token.
_PREFIXES: dict[str, Callable[[str, ScenarioSettings], Scenario]] = {
    "tok_slow_": _slow,
}


def resolve_scenario(payment_method: str, settings: ScenarioSettings) -> Scenario:
    """The scenario for a ``tok_...`` token; unknown tokens are approved.

    Raises ``InvalidRequest`` for a malformed parameterised token (``tok_slow_abc``), so the
    client gets a 400 instead of a surprising approval.
    """
    fixed = _FIXED.get(payment_method)
    if fixed is not None:
        return fixed(settings)
    for prefix, rule in _PREFIXES.items():
        if payment_method.startswith(prefix):
            return rule(payment_method[len(prefix) :], settings)
    return _APPROVED

"""
The one log event per attempt, on the `gateway_client` logger.

INFO for a result, WARNING for an error, with `extra` fields named `gateway_*`: operation,
acquirer, scope, reference (what the call is about: our payment or refund reference, or the
acquirer's charge id for a capture or void), attempt, status, outcome, elapsed (this
attempt) and call_elapsed, decision (return, retry, raise) and stop_reason, the chosen wait
and its source (retry-after, quota-header, gate, backoff), the server's wait and the rate
headers seen, the gate's waits, the retry budget, the breaker's state and the caller's
request id. Never the API key, the Authorization header, the card token or a body. Each event
is also kept, as an `AttemptRecord`, in the call's `Progress.trail` (the call's `attempt_log`),
and put on the attempt's span, which it ends (`_tracing.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from resilience.clock import Clock

from ._call import Attempt, Progress, Stop
from ._tracing import attempt_span_end
from .types import ActionRequired, AttemptRecord, Authorization, Received, Refund

__all__ = ["AttemptLog", "authorization_outcome", "received_or", "refund_outcome"]

logger = logging.getLogger("gateway_client")


class AttemptLog:
    """Writes the attempt events of the acquirer `name`'s calls in quota `scope`."""

    def __init__(self, name: str, scope: str, clock: Clock) -> None:
        self._name = name
        self._scope = scope
        self._clock = clock

    def attempt(
        self,
        progress: Progress,
        attempt: Attempt,
        outcome: str,
        decision: str,
        reason: str | None = None,
    ) -> None:
        """The event of an attempt that was sent: its `outcome` and the loop's `decision`."""
        now = self._clock.monotonic()
        server = attempt.server_wait
        fields: dict[str, Any] = {
            "attempt": progress.attempts,
            "status": attempt.status_code,
            "outcome": outcome,
            "elapsed": now - attempt.started,
            "server_wait": server.seconds if server is not None else None,
            "rate_headers": dict(server.seen) if server is not None else {},
            "started_at": self._clock.time() - (now - attempt.started),
            "error": type(attempt.error).__name__ if attempt.error is not None else None,
            "provider_request_id": attempt.provider_request_id,
        }
        self._emit(progress, fields, decision, reason)

    def stop(self, progress: Progress, stop: Stop) -> None:
        """The event of a call stopped before sending (breaker, gate, concurrency, deadline)."""
        error = stop.error
        fields: dict[str, Any] = {
            "attempt": progress.attempts,
            "status": error.status_code,
            "outcome": type(error).__name__,
            "elapsed": None,
            "server_wait": getattr(error, "retry_after", None),
            "rate_headers": {},
            "started_at": None,
            "error": type(error).__name__,
            "provider_request_id": None,
        }
        self._emit(progress, fields, "raise", stop.reason)

    def _emit(
        self, progress: Progress, fields: dict[str, Any], decision: str, reason: str | None
    ) -> None:
        call_elapsed = self._clock.monotonic() - progress.started
        wait = progress.log.get("wait")
        budget = progress.budget.retries_available if progress.budget is not None else None
        gate = progress.log.get("gate")
        status = fields["status"]
        elapsed = fields["elapsed"]
        level = logging.INFO if decision == "return" else logging.WARNING
        record = AttemptRecord(
            attempt=fields["attempt"],
            sent=fields["started_at"] is not None,
            outcome=fields["outcome"],
            decision=decision,
            started_at=_ms(fields["started_at"]),
            elapsed=_ms(elapsed),
            status_code=status,
            error=fields["error"],
            stop_reason=reason,
            wait=_ms(wait),
            wait_source=progress.log.get("wait_source"),
            server_wait=_ms(fields["server_wait"]),
            budget_retries=budget,
            gate_remaining=_ms(gate),
            gate_waited=round(progress.gate_waited, 3),
            breaker_state=progress.log.get("breaker"),
            provider_request_id=fields["provider_request_id"],
        )
        progress.trail.append(record)
        attempt_span_end(progress.span, self._name, record)
        progress.span = None
        if not logger.isEnabledFor(level):
            return  # the trail above is the call's record; the log line is not wanted
        logger.log(
            level,
            "acquirer attempt operation=%s acquirer=%s reference=%s attempt=%d status=%s "
            "outcome=%s elapsed=%s decision=%s%s wait=%s source=%s budget=%s gate=%s",
            progress.operation,
            self._name,
            progress.reference,
            fields["attempt"],
            status if status is not None else "-",
            fields["outcome"],
            f"{elapsed:.3f}s" if elapsed is not None else "-",
            decision,
            f" reason={reason}" if reason else "",
            f"{wait:.3f}s" if wait is not None else "-",
            progress.log.get("wait_source") or "-",
            budget if budget is not None else "-",
            f"{gate:.3f}s" if gate is not None else "-",
            extra={
                "gateway_operation": progress.operation,
                "gateway_acquirer": self._name,
                "gateway_scope": self._scope,
                "gateway_reference": progress.reference,
                "gateway_attempt": fields["attempt"],
                "gateway_status": status,
                "gateway_outcome": fields["outcome"],
                "gateway_elapsed": elapsed,
                "gateway_call_elapsed": call_elapsed,
                "gateway_decision": decision,
                "gateway_stop_reason": reason,
                "gateway_wait": wait,
                "gateway_wait_source": progress.log.get("wait_source"),
                "gateway_server_wait": fields["server_wait"],
                "gateway_rate_headers": fields["rate_headers"],
                "gateway_gate_waited": progress.gate_waited,
                "gateway_gate_remaining": gate,
                "gateway_budget_retries": budget,
                "gateway_max_attempts": progress.policy.max_attempts,
                "gateway_breaker_state": progress.log.get("breaker"),
                "gateway_request_id": progress.request_id,
                "gateway_provider_request_id": fields["provider_request_id"],
            },
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


# -- the outcome named in an attempt's event ----------------------------------------------------


def authorization_outcome(authorization: Authorization | ActionRequired) -> str:
    """An authorization's (or a finished customer action's) outcome name: `approved`,
    `declined` or `action_required`."""
    if isinstance(authorization, ActionRequired):
        return "action_required"
    return "approved" if authorization.approved else "declined"


def refund_outcome(refund: Refund | Received) -> str:
    """A refund's outcome name: its status, or `received` (pending)."""
    return received_or(refund, refund.status if isinstance(refund, Refund) else "")


def received_or(answer: Authorization | Refund | Received, outcome: str) -> str:
    """The attempt's outcome name: `received` for a pending modification, else `outcome`."""
    return "received" if isinstance(answer, Received) else outcome

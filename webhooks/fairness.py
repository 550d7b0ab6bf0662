"""Which due deliveries to send next: round robin across merchants, within the caps (ADR 0042).

A pure function, no database and no clock, so the order is tested as it is
(tests/unit/test_webhook_fairness.py) and any deliverer can use it: the claim of
``webhooks.delivery`` today (one batch per claim, sent by a thread pool), a deliverer that
claims one slot at a time tomorrow (ask for ``limit=1`` with the current in-flight counts).

The rule: merchants are served in the order of their candidates (the caller lists the merchant
whose oldest due delivery has waited longest first, each merchant's candidates oldest first).
Round one takes each merchant's first sendable candidate, round two each one's second, and so
on, until ``limit`` are taken. A merchant stops once it holds ``merchant_cap`` attempts in
flight (those already leased count), an endpoint once it holds ``endpoint_cap``; a candidate
whose endpoint is at its cap or ``blocked`` (another claimer holds it) is passed over. So one
merchant's backlog, however old and however slow its endpoints, takes at most one place per
round and at most ``merchant_cap`` attempts at once, and a neighbour's fresh delivery is in
the first round of the next pick.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Candidate", "pick_round_robin"]


@dataclass(frozen=True)
class Candidate:
    """A due delivery that may be sent: its id, its merchant and its endpoint."""

    delivery_id: int
    merchant_id: int
    endpoint_id: str


def pick_round_robin(
    candidates: Iterable[Candidate],
    *,
    limit: int,
    merchant_cap: int,
    endpoint_cap: int,
    merchant_in_flight: Mapping[int, int] | None = None,
    endpoint_in_flight: Mapping[str, int] | None = None,
    blocked_endpoints: Collection[str] = (),
) -> list[Candidate]:
    """Up to ``limit`` of ``candidates``, in the order to send them (see the module): round
    robin across merchants in their order of first appearance, each merchant's in its own
    order, at most ``merchant_cap`` in flight per merchant and ``endpoint_cap`` per endpoint
    counting ``merchant_in_flight`` / ``endpoint_in_flight`` (attempts already leased, by
    merchant id / endpoint id), none to ``blocked_endpoints``. Caps and limit are counts
    (>= 0); the inputs are not changed."""
    queues: dict[int, deque[Candidate]] = {}
    for candidate in candidates:
        queues.setdefault(candidate.merchant_id, deque()).append(candidate)
    merchants = dict(merchant_in_flight or {})
    endpoints = dict(endpoint_in_flight or {})
    chosen: list[Candidate] = []
    while queues and len(chosen) < limit:
        for merchant_id in list(queues):
            if len(chosen) >= limit:
                break
            queue = queues[merchant_id]
            taken = None
            while queue and merchants.get(merchant_id, 0) < merchant_cap:
                candidate = queue.popleft()
                endpoint_id = candidate.endpoint_id
                if (
                    endpoint_id in blocked_endpoints
                    or endpoints.get(endpoint_id, 0) >= endpoint_cap
                ):
                    continue  # its endpoint is full or another claimer's: its next pick
                taken = candidate
                break
            if taken is None:
                del queues[merchant_id]  # nothing more for it this time
                continue
            merchants[merchant_id] = merchants.get(merchant_id, 0) + 1
            endpoints[taken.endpoint_id] = endpoints.get(taken.endpoint_id, 0) + 1
            chosen.append(taken)
    return chosen

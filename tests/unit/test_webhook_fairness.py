"""The order in which due deliveries are picked (issue 26, ADR 0042), without a database or a
clock: round robin across merchants, the per-merchant and per-endpoint caps, and, over a
generated corpus of backlogs, the promise a neighbour gets: one place in the first round."""

from __future__ import annotations

import random

import pytest

from webhooks.fairness import Candidate, pick_round_robin

A, B, C = 1, 2, 3


def backlog(merchant: int, n: int, endpoints: int = 16, start: int = 0) -> list[Candidate]:
    """``n`` due deliveries of ``merchant``, oldest first, over its ``endpoints``."""
    return [
        Candidate(merchant * 1000 + start + i, merchant, f"we_{merchant}_{i % endpoints}")
        for i in range(n)
    ]


def ids(chosen: list[Candidate]) -> list[int]:
    return [c.delivery_id for c in chosen]


def test_a_neighbours_fresh_delivery_is_second_behind_a_backlog_not_last():
    """A's 200 old deliveries, then B's one: FIFO would send B's 201st; the pick sends it
    second, then goes on with A."""
    chosen = pick_round_robin(
        backlog(A, 200) + backlog(B, 1), limit=5, merchant_cap=4, endpoint_cap=2
    )
    assert ids(chosen) == [1000, 2000, 1001, 1002, 1003]


def test_rounds_alternate_between_merchants_in_their_order():
    chosen = pick_round_robin(
        backlog(A, 3) + backlog(B, 3) + backlog(C, 1), limit=10, merchant_cap=10, endpoint_cap=5
    )
    assert ids(chosen) == [1000, 2000, 3000, 1001, 2001, 1002, 2002]


def test_the_merchant_cap_counts_the_attempts_already_in_flight():
    """A holds 3 of its 4 slots (leased by another worker): one more for A, then B's."""
    chosen = pick_round_robin(
        backlog(A, 10) + backlog(B, 10), limit=20, merchant_cap=4, endpoint_cap=2,
        merchant_in_flight={A: 3},
    )  # fmt: skip
    assert [c.merchant_id for c in chosen] == [A, B, B, B, B]


def test_a_full_or_blocked_endpoint_is_passed_over_for_the_merchants_next_one():
    """A's first two deliveries are to an endpoint at its cap, the third to one another
    claimer holds: A's turn goes to its fourth; B's endpoint takes two, then is full."""
    candidates = [
        Candidate(1, A, "we_full"), Candidate(2, A, "we_full"), Candidate(3, A, "we_held"),
        Candidate(4, A, "we_free"), Candidate(5, B, "we_b"), Candidate(6, B, "we_b"),
        Candidate(7, B, "we_b"),
    ]  # fmt: skip
    chosen = pick_round_robin(
        candidates, limit=10, merchant_cap=4, endpoint_cap=2,
        endpoint_in_flight={"we_full": 2}, blocked_endpoints={"we_held"},
    )  # fmt: skip
    assert ids(chosen) == [4, 5, 6]


def test_the_limit_and_empty_inputs():
    assert pick_round_robin([], limit=5, merchant_cap=4, endpoint_cap=2) == []
    assert pick_round_robin(backlog(A, 5), limit=0, merchant_cap=4, endpoint_cap=2) == []
    assert ids(pick_round_robin(backlog(A, 5), limit=1, merchant_cap=4, endpoint_cap=2)) == [1000]


@pytest.mark.parametrize("seed", range(100))
def test_every_merchant_with_a_sendable_delivery_is_in_the_first_round(seed):
    """Generated backlogs (1-12 merchants, 0-300 deliveries each, 1-16 endpoints, leases
    already held): each merchant below its cap with a delivery to a free endpoint gets exactly
    one of the first places, in its order, before any merchant gets a second; no merchant or
    endpoint exceeds its cap; nothing is picked twice."""
    rng = random.Random(seed)
    merchants = list(range(1, rng.randint(1, 12) + 1))
    rng.shuffle(merchants)  # the caller's order: the longest waiting head first
    candidates: list[Candidate] = []
    for m in merchants:
        candidates += backlog(m, rng.randint(0, 300), endpoints=rng.randint(1, 16))
    merchant_cap, endpoint_cap = rng.randint(1, 6), rng.randint(1, 3)
    in_flight = {m: rng.randint(0, merchant_cap) for m in merchants if rng.random() < 0.3}
    endpoint_flight = {c.endpoint_id: endpoint_cap for c in candidates if rng.random() < 0.05}
    limit = rng.randint(1, 40)
    chosen = pick_round_robin(
        candidates, limit=limit, merchant_cap=merchant_cap, endpoint_cap=endpoint_cap,
        merchant_in_flight=in_flight, endpoint_in_flight=endpoint_flight,
    )  # fmt: skip

    def sendable(m: int) -> bool:
        return in_flight.get(m, 0) < merchant_cap and any(
            c.merchant_id == m and endpoint_flight.get(c.endpoint_id, 0) < endpoint_cap
            for c in candidates
        )

    first_round = [m for m in merchants if sendable(m)][:limit]
    assert [c.merchant_id for c in chosen[: len(first_round)]] == first_round
    assert len(chosen) == len(set(chosen)) <= limit
    for m in merchants:
        assert in_flight.get(m, 0) + sum(c.merchant_id == m for c in chosen) <= max(
            merchant_cap, in_flight.get(m, 0)
        )
    for endpoint_id in {c.endpoint_id for c in chosen}:
        held = endpoint_flight.get(endpoint_id, 0)
        assert held + sum(c.endpoint_id == endpoint_id for c in chosen) <= endpoint_cap

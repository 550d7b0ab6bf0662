"""``GET /_sandbox/charges``: the sandbox's settlement listing that the ledger audit reads.

Every recorded charge of the caller's account, oldest first, with its idempotency key; no
lookup lag, no acquirer-wide condition, paged with ``starting_after``; bounded like the other
tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from sandbox_acquirer.app import Request, Response, SandboxApp
from sandbox_acquirer.store import SandboxStore

START = datetime(2026, 11, 29, 17, 0, 0, 250_000, tzinfo=UTC)
API_KEY = "sk_unit"
OTHER_API_KEY = "sk_unit_other"


class FakeClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_app(clock: FakeClock, **store_options: Any) -> SandboxApp:
    return SandboxApp(
        store=SandboxStore(clock=clock, **store_options),
        api_keys=(API_KEY, OTHER_API_KEY),
        wait=lambda seconds: clock.advance(seconds),
    )


@pytest.fixture
def app(clock: FakeClock) -> SandboxApp:
    return make_app(clock)


def charge(
    app: SandboxApp,
    token: str = "tok_visa",
    key: str = "key-1",
    reference: str = "order-1",
    api_key: str = API_KEY,
    amount: int = 1050,
) -> Response:
    body = {"amount": amount, "currency": "EUR", "payment_method": token, "reference": reference}
    return app.handle(
        Request(
            method="POST",
            path="/charges",
            headers={
                "authorization": f"Bearer {api_key}",
                "idempotency-key": key,
                "content-type": "application/json",
            },
            body=json.dumps(body).encode(),
        )
    )


def ledger(app: SandboxApp, api_key: str | None = API_KEY, **query: Any) -> Response:
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return app.handle(
        Request(method="GET", path="/_sandbox/charges", query=urlencode(query), headers=headers)
    )


def body_of(response: Response) -> dict[str, Any]:
    return json.loads(response.body)


def test_lists_every_charge_oldest_first_with_its_idempotency_key(
    app: SandboxApp, clock: FakeClock
) -> None:
    first = body_of(charge(app, key="k-1", reference="pay_1"))
    clock.advance(1)
    charge(app, "tok_decline", key="k-2", reference="pay_2", amount=7)
    answer = ledger(app)
    assert answer.status == 200
    listing = body_of(answer)
    assert listing["has_more"] is False
    assert [row["reference"] for row in listing["data"]] == ["pay_1", "pay_2"]
    assert listing["data"][0] == {
        **first,
        "captured": True,
        "amount_captured": first["amount"],
        "amount_refunded": 0,
        "voided": False,
        "captured_at": first["created_at"],
        "voided_at": None,
        "idempotency_key": "k-1",
    }
    assert listing["data"][1]["status"] == "declined"
    assert listing["data"][1]["captured"] is False
    assert listing["data"][1]["amount_captured"] == 0
    assert listing["data"][1]["decline_code"] == "do_not_honor"
    assert listing["data"][1]["amount"] == 7


def test_replays_and_failed_attempts_add_nothing(app: SandboxApp) -> None:
    charge(app, key="k-1", reference="pay_1")
    charge(app, key="k-1", reference="pay_1")  # replay
    charge(app, "tok_fail_503_1", key="k-2", reference="pay_2")  # 503, nothing recorded
    charge(app, "tok_reset_before_commit", key="k-3", reference="pay_3")
    assert [row["reference"] for row in body_of(ledger(app))["data"]] == ["pay_1"]


def test_two_keys_for_one_reference_are_two_rows(app: SandboxApp) -> None:
    charge(app, key="k-1", reference="pay_1")
    charge(app, key="k-2", reference="pay_1")
    rows = body_of(ledger(app))["data"]
    assert [(row["reference"], row["idempotency_key"]) for row in rows] == [
        ("pay_1", "k-1"),
        ("pay_1", "k-2"),
    ]


def test_since_filters_by_the_time_the_charge_was_recorded(
    app: SandboxApp, clock: FakeClock
) -> None:
    charge(app, key="k-1", reference="pay_1")
    clock.advance(60)
    middle = clock.now
    charge(app, key="k-2", reference="pay_2")
    rows = body_of(ledger(app, since=middle.isoformat()))["data"]
    assert [row["reference"] for row in rows] == ["pay_2"]
    z_form = (middle + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert body_of(ledger(app, since=z_form))["data"] == []


def test_pages_with_starting_after(app: SandboxApp) -> None:
    for index in range(5):
        charge(app, key=f"k-{index}", reference=f"pay_{index}")
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": 2} | ({"starting_after": cursor} if cursor else {})
        page = body_of(ledger(app, **query))
        seen += [row["reference"] for row in page["data"]]
        if not page["has_more"]:
            break
        cursor = page["data"][-1]["id"]
    assert seen == [f"pay_{index}" for index in range(5)]


def test_lookup_lag_does_not_hide_a_charge_from_the_listing(app: SandboxApp) -> None:
    charge(app, "tok_lookup_lag_90", key="k-1", reference="pay_1")
    assert [row["reference"] for row in body_of(ledger(app))["data"]] == ["pay_1"]


def test_scoped_to_the_callers_account_and_needs_a_key(app: SandboxApp) -> None:
    charge(app, key="k-1", reference="pay_1")
    charge(app, key="k-1", reference="other_1", api_key=OTHER_API_KEY)
    assert [row["reference"] for row in body_of(ledger(app))["data"]] == ["pay_1"]
    assert [row["reference"] for row in body_of(ledger(app, api_key=OTHER_API_KEY))["data"]] == [
        "other_1"
    ]
    assert ledger(app, api_key=None).status == 401
    assert ledger(app, api_key="wrong").status == 401


def test_answers_during_an_outage_and_is_not_counted(app: SandboxApp) -> None:
    charge(app, key="k-1", reference="pay_1")
    app.handle(
        Request(
            method="POST",
            path="/_sandbox/conditions/outage",
            body=json.dumps({"duration_seconds": 60, "failure": 503}).encode(),
        )
    )
    requests_before = app.store.stats()["requests_by_idempotency_key"]
    answer = ledger(app)
    assert answer.status == 200
    assert len(body_of(answer)["data"]) == 1
    assert app.store.stats()["requests_by_idempotency_key"] == requests_before


@pytest.mark.parametrize(
    "query",
    [
        {"since": "yesterday"},
        {"since": "2026-11-29T17:00:00"},  # no offset
        {"limit": "0"},
        {"limit": "10001"},
        {"limit": "ten"},
        {"starting_after": "ch_unknown"},
        {"reference": "pay_1"},
    ],
)
def test_invalid_queries_are_400(app: SandboxApp, query: dict[str, str]) -> None:
    charge(app)
    answer = ledger(app, **query)
    assert answer.status == 400
    assert body_of(answer)["code"] == "invalid_request"


def test_only_get(app: SandboxApp) -> None:
    answer = app.handle(Request(method="POST", path="/_sandbox/charges"))
    assert answer.status == 405


def test_bounded_and_counted_when_full(clock: FakeClock) -> None:
    app = make_app(clock, max_tracked_keys=3)
    for index in range(5):
        charge(app, key=f"k-{index}", reference=f"pay_{index}")
    rows = body_of(ledger(app))["data"]
    assert [row["reference"] for row in rows] == ["pay_2", "pay_3", "pay_4"]
    assert app.store.stats()["evicted"]["charges_listed"] == 2


def test_reset_forgets_the_listing(app: SandboxApp) -> None:
    charge(app)
    app.handle(Request(method="POST", path="/_sandbox/reset"))
    assert body_of(ledger(app))["data"] == []

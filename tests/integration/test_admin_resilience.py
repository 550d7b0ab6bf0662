"""The resilience page: breakers, rate gate, retry budget, AIMD limit; audited breaker actions."""

from __future__ import annotations

import importlib
import logging
import socket
import uuid

import pytest
import redis
from django.apps import apps
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, User

from acquirers.specs import parse_acquirers
from gateway_client import RedisStore
from payments.acquirer.client import acquirer_client
from resilience.breaker import BreakerSet
from tests.support.redis import suite_redis_url

pytestmark = pytest.mark.django_db

PAGE_URL = "/admin/payments/resilience/"
LIST_URL = "/admin/payments/payment/"
GROUPS = ("authorize", "capture", "void", "refund", "lookup")
ROLES_MIGRATION = importlib.import_module("payments.migrations.0004_operations_roles")
BREAKER_MIGRATION = importlib.import_module("payments.migrations.0005_breaker_operator_permission")


def action_url(group: str, action: str) -> str:
    return f"{PAGE_URL}{group}/{action}/"


def staff_client(client, role: str):
    """A logged-in staff user in ``role`` (groups and permissions from migrations 0004/0005)."""
    ROLES_MIGRATION.create_roles(apps, None)
    BREAKER_MIGRATION.grant_operate_breaker(apps, None)
    user = User.objects.create_user(f"{role}-1", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return client


@pytest.fixture
def operator(client):
    return staff_client(client, "operator")


@pytest.fixture
def support(client):
    return staff_client(client, "support")


def breaker_state(group: str = "authorize") -> str:
    return acquirer_client().breaker_state(group).state


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def shared_store(settings):
    """The acquirer state in a real Redis, under a namespace of this test only."""
    namespace = f"test-resilience-{uuid.uuid4().hex}"
    settings.ACQUIRER_STATE_REDIS_URL = suite_redis_url()
    settings.ACQUIRER_STATE_NAMESPACE = namespace
    yield namespace
    connection = redis.Redis.from_url(suite_redis_url())
    for key in connection.scan_iter(f"{namespace}:*"):
        connection.delete(key)


# --- reading -------------------------------------------------------------------------------


def test_page_renders_every_breaker_for_support(support):
    """support gets 200 with one row per endpoint group, each closed."""
    response = support.get(PAGE_URL)
    assert response.status_code == 200
    rows = {row["group"]: row["snapshot"].state for row in response.context["state"]["breakers"]}
    assert rows == dict.fromkeys(GROUPS, "closed")
    page = response.content.decode()
    assert all(f'id="breaker-{group}"' in page for group in GROUPS)


def test_page_renders_action_buttons_for_operator(operator):
    """operator sees force open, disable and reset for each group."""
    page = operator.get(PAGE_URL).content.decode()
    for group in GROUPS:
        for action in ("force_open", "disable", "reset"):
            assert f'href="{action_url(group, action)}"' in page


def test_support_sees_no_action_buttons(support):
    """support reads the page without any action link."""
    page = support.get(PAGE_URL).content.decode()
    assert "breaker-action" not in page and f"{PAGE_URL}authorize/" not in page


def test_staff_without_a_role_is_refused(client):
    """A staff account without view_payment gets 403."""
    client.force_login(User.objects.create_user("nobody", is_staff=True))
    assert client.get(PAGE_URL).status_code == 403


def test_page_shows_the_breaker_values(support):
    """Failure rate, buffered and refused calls, generation and time until half-open."""
    client = acquirer_client()
    client.breakers.force_open("lookup", actor="test", reason="setup")
    rows = support.get(PAGE_URL).context["state"]["breakers"]
    snapshot = next(row["snapshot"] for row in rows if row["group"] == "lookup")
    assert (snapshot.group, snapshot.state, snapshot.override) == (
        "lookup",
        "forced_open",
        "forced_open",
    )
    assert snapshot.generation == 1 and snapshot.buffered_calls == 0


def test_page_shows_the_rate_gate_not_before(support):
    """A closed gate: its scope, the seconds left and the not-before instant."""
    client = acquirer_client()
    client.gate.close(client.scope, 60)
    response = support.get(PAGE_URL)
    gate = response.context["state"]["gate"]
    assert gate["scope"] == client.scope and gate["closed"]
    assert 55 < gate["remaining"] <= 60 and gate["not_before"] is not None
    assert "⚠ closed" in response.content.decode()


def test_page_shows_the_retry_budget(support):
    """The budget's retries available now: the reserve (10/s over 10 s) when nothing failed."""
    budget = support.get(PAGE_URL).context["state"]["budget"]
    assert budget["retries_available"] == 100 and budget["reserve"] == 100


def test_page_shows_the_aimd_limit_and_in_flight(support):
    """The quota scope's concurrency limit and the slots held now."""
    client = acquirer_client()
    slot = client.limiter.try_acquire(client.scope)
    assert slot is not None
    limiter = support.get(PAGE_URL).context["state"]["limiter"]
    assert (limiter.scope, limiter.limit, limiter.in_flight) == (client.scope, 100, 1)


def test_reading_the_page_changes_no_state(support):
    """A forced-open breaker read by the page counts no refusal and keeps its generation."""
    client = acquirer_client()
    client.breakers.force_open("authorize", actor="test", reason="setup")
    before = client.breaker_state("authorize")
    support.get(PAGE_URL)
    after = client.breaker_state("authorize")
    assert (after.refused_calls, after.generation) == (before.refused_calls, before.generation)


# --- store warnings ------------------------------------------------------------------------


def test_memory_store_warning_is_shown(support):
    """No ACQUIRER_STATE_REDIS_URL: the page warns that overrides affect this process only."""
    page = support.get(PAGE_URL).content.decode()
    assert 'id="memory-store-warning"' in page
    assert "ACQUIRER_STATE_REDIS_URL" in page


def test_no_memory_store_warning_with_a_shared_store(support, shared_store):
    """With Redis as the state store: no process-only warning."""
    response = support.get(PAGE_URL)
    assert response.context["state"]["store_kind"] == "redis"
    assert 'id="memory-store-warning"' not in response.content.decode()


def test_fallback_warning_when_redis_is_unreachable(support, settings):
    """Redis configured but down: the page says it shows this process's fallback."""
    settings.ACQUIRER_STATE_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    page = support.get(PAGE_URL).content.decode()
    assert 'id="fallback-store-warning"' in page


# --- actions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "preset", "expected"),
    [
        ("force_open", None, "forced_open"),
        ("disable", None, "disabled"),
        ("reset", "force_open", "closed"),
    ],
)
def test_action_with_a_note_changes_the_breaker_state(operator, action, preset, expected):
    """Force open, disable and reset each move the group's breaker to their state."""
    if preset:
        getattr(acquirer_client().breakers, preset)("authorize", actor="test", reason="setup")
    response = operator.post(action_url("authorize", action), {"note": "INC-42 drill"})
    assert response.status_code == 302 and response["Location"] == PAGE_URL
    assert breaker_state("authorize") == expected
    assert breaker_state("lookup") == "closed"


def test_action_writes_an_admin_log_entry(operator):
    """Who, when and why: a LogEntry on the circuitbreaker content type with the note."""
    operator.post(action_url("lookup", "force_open"), {"note": "INC-42 acquirer down"})
    entry = LogEntry.objects.get()
    assert entry.user.username == "operator-1" and entry.action_flag == CHANGE
    assert (entry.content_type.app_label, entry.content_type.model) == (
        "payments",
        "circuitbreaker",
    )
    assert entry.object_id == "lookup"
    assert "closed -> forced_open" in entry.change_message
    assert "INC-42 acquirer down" in entry.change_message


def test_action_hands_the_operator_and_note_to_the_breaker(operator, caplog):
    """The breaker's own WARNING log carries the username as actor and the note as reason."""
    with caplog.at_level(logging.WARNING, logger="gateway_client.breaker"):
        operator.post(action_url("authorize", "disable"), {"note": "INC-7 false trips"})
    record = next(r for r in caplog.records if getattr(r, "gateway_breaker_action", None))
    assert record.gateway_breaker_actor == "operator-1"
    assert record.gateway_breaker_reason == "INC-7 false trips"


def test_page_lists_the_recorded_action(operator):
    """The history at the bottom of the page shows the action, its operator and note."""
    operator.post(action_url("authorize", "force_open"), {"note": "INC-9 maintenance"})
    page = operator.get(PAGE_URL).content.decode()
    assert "INC-9 maintenance" in page and "operator-1" in page


@pytest.mark.parametrize("note", ["", "   "])
def test_action_without_a_note_is_refused(operator, note):
    """An empty or blank note: the form again with an error; state and history unchanged."""
    response = operator.post(action_url("authorize", "force_open"), {"note": note})
    assert response.status_code == 200 and response.context["form"].errors
    assert breaker_state("authorize") == "closed"
    assert not LogEntry.objects.exists()


def test_action_page_asks_for_a_note(operator):
    """GET shows what the action does and the note field; nothing changes."""
    response = operator.get(action_url("authorize", "force_open"))
    assert response.status_code == 200 and 'name="note"' in response.content.decode()
    assert breaker_state("authorize") == "closed"


def test_support_gets_403_on_an_action_post(support):
    """support may not act: 403, the breaker and the history unchanged."""
    response = support.post(action_url("authorize", "force_open"), {"note": "trying"})
    assert response.status_code == 403
    assert breaker_state("authorize") == "closed"
    assert not LogEntry.objects.exists()


def test_support_gets_403_on_an_action_page(support):
    """support cannot even open an action's page."""
    assert support.get(action_url("authorize", "reset")).status_code == 403


@pytest.mark.parametrize("url", [action_url("charges", "reset"), action_url("lookup", "explode")])
def test_unknown_group_or_action_is_404(operator, url):
    """Only the client's endpoint groups and the three actions exist."""
    assert operator.post(url, {"note": "x"}).status_code == 404


def test_action_on_the_shared_store_reaches_every_process(operator, shared_store):
    """With Redis, the override is written there: a second client on the store sees it."""
    operator.post(action_url("authorize", "force_open"), {"note": "INC-42"})
    other = BreakerSet(
        RedisStore.from_url(suite_redis_url(), namespace=shared_store), name="sandbox"
    )
    assert other.snapshot()["authorize"].state == "forced_open"


# --- links and roles -----------------------------------------------------------------------


def test_admin_index_links_the_page(support):
    """The admin index lists "Acquirer resilience" under Payments."""
    page = support.get("/admin/").content.decode()
    assert f'href="{PAGE_URL}"' in page and "Acquirer resilience" in page


def test_payments_changelist_links_the_page(support):
    """The payments list has an "Acquirer resilience" button."""
    page = support.get(LIST_URL).content.decode()
    assert f'<a href="{PAGE_URL}" class="resilience-link">' in page


def test_payments_changelist_warns_of_a_refusing_breaker(support):
    """An open (here forced open) authorize breaker is announced above the payments list."""
    acquirer_client().breakers.force_open("authorize", actor="test", reason="setup")
    page = support.get(LIST_URL).content.decode()
    assert 'id="breaker-banner"' in page and "new payments are answered 503" in page


def test_only_operator_may_operate_the_breakers():
    """Migration 0005 grants payments.operate_breaker to operator, not to support."""
    ROLES_MIGRATION.create_roles(apps, None)
    BREAKER_MIGRATION.grant_operate_breaker(apps, None)
    users = {}
    for role in ("operator", "support"):
        users[role] = User.objects.create_user(f"{role}-x")
        users[role].groups.add(Group.objects.get(name=role))
    assert users["operator"].has_perm("payments.operate_breaker")
    assert not users["support"].has_perm("payments.operate_breaker")


def test_two_acquirers_each_have_their_page_and_their_own_breakers(operator, settings):
    """With ACQUIRERS naming alpha and beta, the page links both; an action on beta's breaker
    (``?acquirer=beta``) changes beta's only, and the history names beta. No key is shown."""
    settings.ACQUIRERS = parse_acquirers(
        '[{"name": "alpha", "base_url": "http://127.0.0.1:9", "api_key": "sk_alpha_SECRET"},'
        ' {"name": "beta", "base_url": "http://127.0.0.1:9", "api_key": "sk_beta_SECRET"}]'
    )
    page = operator.get(PAGE_URL).content.decode()
    assert 'id="acquirers"' in page and "?acquirer=beta" in page
    assert f'href="{action_url("authorize", "force_open")}?acquirer=alpha"' in page
    beta_page = operator.get(f"{PAGE_URL}?acquirer=beta").content.decode()
    assert f'href="{action_url("authorize", "force_open")}?acquirer=beta"' in beta_page
    assert operator.get(f"{PAGE_URL}?acquirer=gamma").status_code == 404
    response = operator.post(
        f"{action_url('authorize', 'force_open')}?acquirer=beta", {"note": "INC-7 beta down"}
    )
    assert response.status_code == 302 and response["Location"] == f"{PAGE_URL}?acquirer=beta"
    assert acquirer_client("beta").breaker_state("authorize").state == "forced_open"
    assert acquirer_client("alpha").breaker_state("authorize").state == "closed"
    assert "circuit breaker beta/authorize" in LogEntry.objects.get().object_repr
    for body in (page, beta_page, operator.get(LIST_URL).content.decode()):
        assert "SECRET" not in body
    assert (
        "Acquirer beta: its authorize circuit breaker is forced_open"
        in operator.get(LIST_URL).content.decode()
    )

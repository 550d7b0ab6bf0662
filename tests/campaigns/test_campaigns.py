"""The fault campaigns of campaigns/, short versions, on one stack started as subprocesses
(sandbox, gunicorn with 3 workers, a Celery worker on Redis with its own queue, beat sweeping
every second) over a database of their own (``<DATABASE_URL's name>_campaigns``, dropped
afterwards unless ``CAMPAIGN_KEEP_DATABASE`` is set). Each test fails with the campaign's
printed figures and violations. The soak is left to ``make campaign-short``; ``make
campaign`` runs the full versions."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from campaigns.harness import Stack, StackOptions
from campaigns.runner import (
    MERCHANTS,
    PROFILES,
    campaign_prepare,
    final_audit,
    run_campaign,
)

pytestmark = [pytest.mark.campaign, pytest.mark.e2e]

SHORT = PROFILES["short"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_url) -> Iterator[Stack]:
    options = StackOptions(
        out_dir=tmp_path_factory.mktemp("campaigns"),
        redis_url=redis_url,
        drop_database_at_exit=not os.environ.get("CAMPAIGN_KEEP_DATABASE"),
        # 10 s to connect, not 3: make test's other workers load the machine meanwhile.
        env={**SHORT["stack"], "DATABASE_CONNECT_TIMEOUT_SECONDS": "10"},
    )
    with Stack.running(options) as running:
        running.prepare_merchants(
            [
                MERCHANTS[name]
                for name in (
                    "storms",
                    "crash",
                    "matrix",
                    "notifications",
                    "schemathesis",
                    "deferred",
                    "failover",
                    "providers",
                    "secrets",
                )
            ]
        )
        yield running


def campaign(stack: Stack, name: str):
    campaign_prepare(stack)
    assert stack.web is not None
    states = stack.web.breaker_states()
    assert states and set(states.values()) == {"closed"}, f"not a known start: {states}"
    result = run_campaign(stack, name, SHORT[name])
    print(result.report())
    assert result.ok, result.report()
    return result


def test_same_key_storms_make_one_payment_and_one_charge_per_key(stack):
    """50 keys x 20 simultaneous requests: one payment each, one acquirer record, no 5xx."""
    campaign(stack, "storms")


def test_payments_left_by_crashes_are_resolved_once(stack):
    """The web worker SIGKILLs itself at each crash point; reconciliation resolves every
    payment, nothing lost or charged twice, the key then replays the final answer."""
    campaign(stack, "crash")


def test_fault_matrix_ends_every_payment_in_an_allowed_state(stack):
    """Every token scenario under every acquirer-wide condition: succeeded, declined,
    failed without a record or needs_review; answers consistent; the audit clean."""
    campaign(stack, "matrix")


def test_notifications_dropped_duplicated_and_reordered_change_no_final_state(stack):
    """The fault matrix again with the sandbox's signed notifications on: a fifth dropped, a
    third sent twice, each delayed up to 3 s (out of order): every payment and operation final
    and consistent with the sandbox, each notification stored once and applied at most once,
    none refused; the audit clean."""
    campaign(stack, "notifications")


def test_schemathesis_finds_no_server_error_and_only_problem_json_errors(stack):
    """A few hundred generated requests: no 500/504, every error application/problem+json."""
    campaign(stack, "schemathesis")


def test_a_deferred_backlog_drains_within_the_acquirers_capacity(stack):
    """50 renewals deferred during an outage, drained after it: all succeeded, one record
    each, never more arrivals in a second than the sandbox's capacity."""
    campaign(stack, "deferred")


def test_failover_never_authorizes_a_payment_at_two_acquirers_nor_loses_one(stack):
    """Two acquirers, alpha refusing connections, answering 503, timing out and resetting
    after commit in turn; 50 payments through a gunicorn with alpha and beta and the same 50
    through one with alpha alone: no payment with records at both sandboxes (their settlement
    listings), none lost, no attempt elsewhere after an ambiguous one. The success rates are
    printed, not asserted."""
    result = campaign(stack, "failover")
    assert result.figures["authorized at two acquirers"] == 0
    assert result.figures["two records at one acquirer"] == 0
    assert result.figures["lost (processing, missing at its acquirer, record of no payment)"] == 0


def test_three_providers_fail_over_only_where_a_token_allows_never_twice_never_lost(stack):
    """A sandbox, localstripe and the Adyen fake, each down twice in turn (certain and
    ambiguous outages); 60 payments (tok_, pm_, spm_) with refunds through a gunicorn whose
    Adyen also charges tok_ and the same 60 through one with a provider per token: each
    provider's own books show no payment authorized twice, none lost, no refund doubled,
    everything final; payments and charges at each provider, failovers done. The failover
    and single-provider success rates are printed."""
    result = campaign(stack, "providers")
    assert result.figures["authorized twice"] == 0
    assert result.figures["lost (not final, missing at its provider, approval of no payment)"] == 0
    assert result.figures["refunds doubled"] == 0
    assert result.figures["payments moved to another provider (failover arm)"] > 0


def test_no_secret_in_logs_database_or_admin(stack):
    """At DEBUG, with card numbers and API keys in inputs: none in any log (the campaigns'
    before it included), the database dump or the admin pages."""
    campaign(stack, "secrets")


def test_ledger_audit_of_the_whole_run_is_clean(stack):
    """The operator's audit over everything the campaigns did: no discrepancy."""
    result = final_audit(stack)
    print(result.report())
    assert result.ok, result.report()

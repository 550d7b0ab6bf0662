"""Running campaigns on one stack: the short and full profiles, and the final audit."""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from typing import Any

from campaigns.harness import CampaignResult, Stack, StackOptions

#: Campaign name -> module (each has ``run(stack, **params) -> CampaignResult``), in run order.
CAMPAIGNS: dict[str, str] = {
    "storms": "campaigns.storms",
    "crash": "campaigns.crash",
    "matrix": "campaigns.matrix",
    "schemathesis": "campaigns.fuzz",
    "soak": "campaigns.soak",
    "webhooks": "campaigns.webhooks",
    "deferred": "campaigns.deferred",
    "failover": "campaigns.failover",
    "providers": "campaigns.providers",
    "notifications": "campaigns.notifications",
    "secrets": "campaigns.secrets",
}

#: The merchant each campaign creates (``stack.create_merchant(name)``), made up front.
MERCHANTS = {
    "storms": "storms",
    "crash": "crash",
    "matrix": "matrix",
    "schemathesis": "fuzz",
    "soak": "soak",
    "webhooks": "webhooks",
    "deferred": "deferred",
    "failover": "failover",
    "providers": "providers",
    "notifications": "notifications",
    "secrets": "secrets",
}

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "full": {
        # The circuit breaker stays open 5 s instead of 30 s, and the matrix sends 8 payments
        # a second: each condition then sees the breaker open, probe and close several times,
        # and the payments behind it still reach the scenarios.
        "stack": {"ACQUIRER_BREAKER_OPEN_SECONDS": "5"},
        "storms": {"keys": 50, "per_key": 20},
        "crash": {"runs": 50},
        "matrix": {"payments": 1000, "concurrency": 16, "recovery_timeout": 60, "pace": 8},
        "schemathesis": {"min_requests": 10_000, "max_examples": 800},
        "soak": {"seconds": 600, "rate": 20},
        "secrets": {},
        "webhooks": {"payments": 1000, "concurrency": 16, "recovery_timeout": 0, "pace": 8},
        "notifications": {"payments": 1000, "concurrency": 16, "recovery_timeout": 0, "pace": 8},
        "deferred": {"payments": 500, "concurrency": 16, "capacity": 20, "drain_timeout": 300},
        # Per arm (two arms at once): 1000 payments at 6/s, alpha 4 s healthy then 6 s down.
        "failover": {"payments": 1000, "pace": 6, "outage_seconds": 6, "healthy_seconds": 4},
        # Per arm: 600 payments at 8/s, 2 s healthy then 3 s of one provider's outage.
        "providers": {"payments": 600, "pace": 8, "outage_seconds": 3, "healthy_seconds": 2},
    },
    "short": {
        # The circuit breaker stays open 3 s instead of 30 s, so the short matrix covers the
        # conditions after the first one that opens it.
        "stack": {"ACQUIRER_BREAKER_OPEN_SECONDS": "3"},
        "storms": {"keys": 25, "per_key": 20},
        "crash": {"runs": 3},
        "matrix": {"payments": 100, "concurrency": 16, "recovery_timeout": 8},
        # One round (about 560 requests) unless it falls short of 250: the suite's in-process
        # Schemathesis test (tests/integration/test_openapi_schemathesis.py) requires the links.
        "schemathesis": {
            "min_requests": 250,
            "max_examples": 15,
            "min_rounds": 1,
            "require_linked": False,
        },
        "soak": {"seconds": 60, "rate": 20},
        "secrets": {},
        "webhooks": {"payments": 100, "concurrency": 16, "recovery_timeout": 0},
        "notifications": {"payments": 100, "concurrency": 16, "recovery_timeout": 0},
        "deferred": {"payments": 50, "concurrency": 16, "capacity": 20, "drain_timeout": 60},
        # 50 per arm (100 in all) over one cycle of alpha's four outages.
        "failover": {
            "payments": 50,
            "pace": 10,
            "outage_seconds": 1.0,
            "healthy_seconds": 0.25,
            "web_workers": 1,
            "web_threads": 12,
        },
        # 60 per arm over one cycle of the six outages (a sandbox, stripe and adyen each
        # down twice, certain and ambiguous).
        "providers": {
            "payments": 60,
            "pace": 8,
            "outage_seconds": 1.0,
            "healthy_seconds": 0.25,
            "web_workers": 1,
            "web_threads": 12,
        },
    },
}


def campaign_prepare(stack: Stack) -> None:
    """Before each campaign: the sandbox without conditions and the acquirer client's shared
    state reset (breakers closed, gate open, budget full), so no campaign inherits another's
    breaker or gate."""
    stack.sandbox.clear_conditions()
    stack.reset_acquirer_state()


def run_campaign(stack: Stack, name: str, params: dict[str, Any]) -> CampaignResult:
    module = importlib.import_module(CAMPAIGNS[name])
    started = time.monotonic()
    result = module.run(stack, **params)
    result.seconds = time.monotonic() - started
    return result


def run_campaigns(
    names: Sequence[str],
    profile: dict[str, dict[str, Any]],
    options: StackOptions,
    *,
    echo: bool = False,
) -> list[CampaignResult]:
    """Start one stack, run ``names`` in the order of :data:`CAMPAIGNS` (secrets last), then
    audit everything since the stack started. Returns every result (the final audit is
    ``ledger-total``)."""
    ordered = [name for name in CAMPAIGNS if name in names]
    results: list[CampaignResult] = []
    options.env = {**profile.get("stack", {}), **options.env}
    with Stack.running(options) as stack:
        stack.prepare_merchants([MERCHANTS[name] for name in ordered])
        for name in ordered:
            campaign_prepare(stack)
            result = run_campaign(stack, name, profile.get(name, {}))
            results.append(result)
            if echo:
                print(result.report(), flush=True)
        results.append(final_audit(stack))
        if echo:
            print(results[-1].report(), flush=True)
    return results


def final_audit(stack: Stack) -> CampaignResult:
    """The ledger audit over the whole run: every payment every campaign made."""
    from campaigns.harness import audit_figures

    result = CampaignResult("ledger-total")
    started = time.monotonic()
    stack.sandbox.clear_conditions()
    stack.wait_resolved(stack.started_at, timeout=60)
    audit = stack.audit(stack.started_at, "total")
    result.figures["payments by status"] = audit["payments_by_status"]
    audit_figures(result, audit)
    result.figures["audit exit status"] = audit["exit"]
    result.check(audit["exit"] == (0 if audit["clean"] else 1), "audit exit status is wrong")
    result.seconds = time.monotonic() - started
    return result

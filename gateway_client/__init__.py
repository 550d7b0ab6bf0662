"""
A framework-free client for the upstream card acquirer.

Plain Python and httpx: no Django, DRF, Celery or project package is imported here, and no
setting or environment variable is read. The caller hands in an `AcquirerConfig`, and
optionally a `RetryPolicy` and a shared `StateStore`:

    config = AcquirerConfig(base_url="https://acquirer.example", api_key=key, name="acme")
    store = RedisStore.from_url("redis://127.0.0.1:6379/0", namespace="payments")
    with AcquirerClient(config, policy=RetryPolicy(), store=store) as client:
        authorization = client.authorize(AuthorizationRequest(..., capture=False))
        captured = client.capture(CaptureRequest(authorization.acquirer_reference, None, key))
        refund = client.refund(RefundRequest(charge_id, refund_reference, 500, key))
        later = client.lookup(payment_reference, policy=RetryPolicy(deadline=30.0))
        refunds = client.lookup_refunds(refund_reference, policy=RetryPolicy(deadline=30.0))

A decline is a value (`Authorization.approved is False`), and so is a failed refund
(`Refund.status == "failed"`); infrastructure failures raise a `GatewayError` whose branch says
whether the request may have been applied (see errors.py and classify.py); the acquirer's rule
refusals are PermanentErrors whose `acquirer_code` names the rule. Retries, deadlines,
Retry-After, quota headers, the shared rate gate and the retry budget are described in
client.py, policy.py, quota.py, gate.py and budget.py. Each endpoint group has a circuit
breaker on the failure rate, shared through the store (breaker.py), and each quota scope an
adaptive (AIMD) concurrency limit (aimd.py):

    allowed, retry_after = client.admits("authorize")    # cheap pre-check, takes no permit
    client.breakers.snapshot()                           # per group: state, rate, counts
    client.breakers.force_open("authorize", actor="ops", reason="incident 42")

The names below are the public surface, `classify_exception` included (what an httpx
exception means: the classification merchant_client shares). The parts the client is built
on (the state store, CircuitBreaker, BreakerSet, AimdLimiter, RetryBudget, RateGate,
AtomicScript, the metrics hooks, Retry-After and quota parsing, backoff, deadline, clock) are
the resilience kit's: `from resilience import BreakerSet` (resilience/__init__.py). The ones
this package exported before the kit had its own package (the store, the clock, the breaker
and limiter configs) are still exported here, the same objects.
"""

from resilience import (
    AimdConfig,
    BreakerConfig,
    BreakerSnapshot,
    Clock,
    LimiterSnapshot,
    ManualClock,
    MemoryStore,
    RedisStore,
    StateStore,
)

from .adyen import AdyenDialect
from .adyen_notifications import (
    AdyenNotifications,
    NotificationError,
    NotificationItem,
    notification_items,
)
from .classify import classify_exception
from .client import AcquirerClient
from .dialect import Dialect, LookupUnsupported, WireRequest
from .disputes import (
    ADYEN_DISPUTE_EVENTS,
    ADYEN_DISPUTE_STATUSES,
    CLOSED_DISPUTE_STATUSES,
    STRIPE_DISPUTE_STATUSES,
    DisputeNotice,
)
from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    CircuitOpenError,
    ConcurrencyLimitedError,
    ConnectionFailedError,
    ConnectionLostError,
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryableError,
    RetryBudgetExhaustedError,
    UpstreamServerError,
)
from .notifications import (
    MAX_NOTIFICATION_BYTES,
    NotificationConnector,
    NotificationRejected,
    OperationOutcome,
    ProviderNotification,
)
from .policy import RetryPolicy
from .sandbox_dialect import SandboxDialect
from .sandbox_notifications import SandboxNotifications, standard_webhooks_signature
from .stripe import StripeDialect
from .stripe_listing import (
    STRIPE_LISTING_PAGE_SIZE,
    stripe_listed_payment_intent,
    stripe_listed_refund,
    stripe_listing_page,
    stripe_listing_request,
)
from .stripe_notifications import StripeNotifications, stripe_signature_header
from .types import (
    AcquirerConfig,
    ActionDetailsRequest,
    ActionRequired,
    AttemptRecord,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Received,
    Refund,
    RefundRequest,
    VoidRequest,
)

__all__ = [  # noqa: RUF022 - grouped: the client, then the error tree in hierarchy order
    # the client and its values
    "AcquirerClient",
    "AcquirerConfig",
    "ActionDetailsRequest",
    "ActionRequired",
    "AimdConfig",
    "AttemptRecord",
    "Authorization",
    "AuthorizationRequest",
    "BreakerConfig",
    "BreakerSnapshot",
    "CaptureRequest",
    "Clock",
    "LimiterSnapshot",
    "ManualClock",
    "MemoryStore",
    "Received",
    "RedisStore",
    "Refund",
    "RefundRequest",
    "RetryPolicy",
    "StateStore",
    "VoidRequest",
    "classify_exception",
    # the connector seam (dialect.py) and its dialects
    "AdyenDialect",
    "Dialect",
    "LookupUnsupported",
    "SandboxDialect",
    "StripeDialect",
    "WireRequest",
    # provider notifications (notifications.py) and disputes (disputes.py), per connector
    "ADYEN_DISPUTE_EVENTS",
    "ADYEN_DISPUTE_STATUSES",
    "CLOSED_DISPUTE_STATUSES",
    "MAX_NOTIFICATION_BYTES",
    "STRIPE_DISPUTE_STATUSES",
    "AdyenNotifications",
    "DisputeNotice",
    "NotificationConnector",
    "NotificationRejected",
    "OperationOutcome",
    "ProviderNotification",
    "SandboxNotifications",
    "StripeNotifications",
    "standard_webhooks_signature",
    "stripe_signature_header",
    # Adyen's notification items, read by the ledger audit (adyen_notifications.py)
    "NotificationError",
    "NotificationItem",
    "notification_items",
    # Stripe's listings of a time range, for the ledger audit (stripe_listing.py)
    "STRIPE_LISTING_PAGE_SIZE",
    "stripe_listed_payment_intent",
    "stripe_listed_refund",
    "stripe_listing_page",
    "stripe_listing_request",
    # the error tree (errors.py)
    "GatewayError",
    "RetryableError",
    "ConnectionFailedError",
    "RateLimitedError",
    "ConcurrencyLimitedError",
    "AcquirerUnavailableError",
    "CircuitOpenError",
    "RetryBudgetExhaustedError",
    "AmbiguousOutcomeError",
    "ResponseTimeoutError",
    "UpstreamServerError",
    "ConnectionLostError",
    "MalformedResponseError",
    "IdempotencyConflictError",
    "PermanentError",
    "InvalidRequestError",
    "AuthenticationError",
]

"""
A client of the payment API for merchants' backends: framework-free (httpx), typed.

    from merchant_client import MerchantClient, Pending

    with MerchantClient("https://payments.example", api_key) as client:
        result = client.create_payment(1999, "EUR", "tok_visa", idempotency_key=order.key)
        if isinstance(result, Pending):
            result = client.wait_until_final(result, timeout=60)

One idempotency key per logical operation, the same on every retry and re-send (the caller's,
or a generated one handed to `persist_key` before the first send); the retries the API's
contract allows, within a deadline (`merchant_client.retry`), built on the `resilience` kit's
full-jitter backoff, deadline-aware sockets, strict `Retry-After` reader and clock. Results are
`Payment` / `Refund`, or `Pending` for a `202`; errors one tree by problem `code`
(`merchant_client.errors`); webhooks verified with `verify_webhook` (Standard Webhooks).
See merchant_client/README.md.
"""

from gateway_client import RetryPolicy
from resilience import ManualClock

from .client import MerchantClient
from .errors import (
    AcquirerError,
    AmountExceedsCapturable,
    AmountExceedsRefundable,
    AuthenticationRateLimited,
    CardDataNotAccepted,
    ConcurrencyLimited,
    Conflict,
    ConnectionFailed,
    DatabaseUnavailable,
    IdempotencyKeyInUse,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    InvalidPaymentState,
    InvalidRequest,
    MerchantApiError,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    ProblemError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    TransportError,
    Unauthorized,
    ValidationError,
)
from .retry import DEFAULT_POLICY
from .types import ActionRequired, NextAction, Page, Payment, Pending, Refund
from .webhooks import (
    Event,
    WebhookError,
    WebhookPayloadInvalid,
    WebhookVerificationFailed,
    verify_webhook,
)

__all__ = [  # noqa: RUF022 - grouped: the client and its values, then the error tree in order
    "DEFAULT_POLICY",
    "ActionRequired",
    "Event",
    "ManualClock",
    "MerchantClient",
    "NextAction",
    "Page",
    "Payment",
    "Pending",
    "Refund",
    "RetryPolicy",
    "verify_webhook",
    "WebhookError",
    "WebhookPayloadInvalid",
    "WebhookVerificationFailed",
    # the error tree (errors.py)
    "MerchantApiError",
    "TransportError",
    "ConnectionFailed",
    "OutcomeUnknown",
    "ProblemError",
    "InvalidRequest",
    "ValidationError",
    "CardDataNotAccepted",
    "IdempotencyKeyMissing",
    "IdempotencyKeyInvalid",
    "Unauthorized",
    "PermissionDenied",
    "NotFound",
    "Conflict",
    "IdempotencyKeyInUse",
    "InvalidPaymentState",
    "AmountExceedsCapturable",
    "AmountExceedsRefundable",
    "IdempotencyKeyReused",
    "RateLimited",
    "ConcurrencyLimited",
    "AuthenticationRateLimited",
    "ServerError",
    "AcquirerError",
    "ServiceUnavailable",
    "DatabaseUnavailable",
]

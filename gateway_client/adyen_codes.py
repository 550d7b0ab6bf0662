"""
Adyen's words, as tables: what each `resultCode` of `/payments` means to us, how an error
answer (HTTP status, `errorCode`, `errorType`) is classified, and the currencies whose minor
units differ between ISO 4217 and Adyen. The dialect (adyen.py) reads them; docs/connectors.md
repeats them as the failure table.

Sources: Adyen's Checkout API v71 OpenAPI description (`PaymentResponse.resultCode`, its
14-value enum; `ServiceError`), Adyen's "API idempotency" page (keys up to 64 characters, kept
at least 31 days; a request whose key is still being processed is refused with error code
`704` and may be sent again with the same key) and its "Currency codes" page (the decimals
that differ from ISO 4217).
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ADYEN_EXPONENT_EXCEPTIONS",
    "AUTHORIZATION_RESULTS",
    "IDEMPOTENCY_IN_PROGRESS",
    "SHOPPER_ACTION_REQUIRED",
    "ResultMeaning",
]

#: What a `resultCode` means to an authorization without a shopper present:
#: "approved" (authorised), "declined" (a final refusal: a result), "shopper" (the payment
#: waits for the shopper: a customer action when the payment has a return address and Adyen
#: gave a `GET` redirect (adyen_action.py, docs/adr/0049); otherwise no shopper can act, so
#: a decline with the code `shopper_action_required`, and Adyen expires the payment
#: unauthorised), "unknown" (no final outcome in the answer: ambiguous, resolved by the
#: AUTHORISATION notification or a person).
ResultMeaning = Literal["approved", "declined", "shopper", "unknown"]

#: Every value of `PaymentResponse.resultCode` in Checkout v71, and its meaning (docs/adr/0041).
AUTHORIZATION_RESULTS: dict[str, ResultMeaning] = {
    # Final: the payment was authorised (our amount: we never ask for a partial one).
    "Authorised": "approved",
    # Final refusals: no money held. `refusalReasonCode` / `refusalReason` give the code.
    "Refused": "declined",
    "Cancelled": "declined",
    "Error": "declined",
    # The shopper must act (3-D Secure, a redirect, a voucher to show): a customer action
    # when Adyen gave a GET redirect to a payment with a return address, else a decline.
    "RedirectShopper": "shopper",
    "IdentifyShopper": "shopper",
    "ChallengeShopper": "shopper",
    "PresentToShopper": "shopper",
    # Accepted, outcome later (Received: "will be processed"; Pending: the final status
    # cannot be obtained now): ambiguous, resolved by the AUTHORISATION notification.
    "Received": "unknown",
    "Pending": "unknown",
    # Held for part of the amount only: money is held, but not what we asked; never
    # approved on our side, never declined either (the hold is real): ambiguous, a person
    # voids it (needs_review).
    "PartiallyAuthorised": "unknown",
    # Authentication-only answers and `Success` (not a card authorization's outcome in the
    # description): we never ask for them, so they say nothing about our payment: ambiguous.
    "AuthenticationFinished": "unknown",
    "AuthenticationNotRequired": "unknown",
    "Success": "unknown",
}

#: The decline code of a payment that waits for a shopper action.
SHOPPER_ACTION_REQUIRED = "shopper_action_required"

#: Adyen's `errorCode` for "request already processed or in progress": the same idempotency
#: key while its first request is being processed. Ambiguous (that request may apply), and
#: safe to send again with the same key later; never a new key.
IDEMPOTENCY_IN_PROGRESS = "704"

#: Currencies whose minor units on Adyen differ from ISO 4217: code -> (ISO 4217 exponent,
#: Adyen's exponent). Any other currency's amount is the same number on both sides.
ADYEN_EXPONENT_EXCEPTIONS: dict[str, tuple[int, int]] = {
    "CLP": (0, 2),
    "CVE": (2, 0),
    "IDR": (2, 0),
    "ISK": (0, 2),
}

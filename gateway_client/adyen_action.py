"""
Adyen's customer action (3-D Secure by redirect; docs/adr/0049), the two halves:

- The `/payments` answer `RedirectShopper` (or `ChallengeShopper` / `IdentifyShopper`) to an
  authorization that carried our return address (`returnUrl`) with `action: {"type":
  "redirect", "method": "GET", "url": ...}` is `ActionRequired`: a link the shopper's browser
  follows. Only a `GET` redirect is one; a `POST` redirect (with `data` the browser must
  submit as a form) and any other action (`threeDS2`, `sdk`, a voucher...) give no link:
  `redirect_action` returns None and the dialect declines the payment
  `shopper_action_required`, as before customer actions (Adyen expires the payment
  unauthorised; docs/connectors.md).
- Adyen sends the shopper back to `returnUrl` with `redirectResult` in the query: an opaque
  result Adyen signed. `POST /payments/details` with `{"details": {"redirectResult": ...}}`
  has Adyen verify it and answer the payment's outcome (`PaymentDetailsResponse`, the same
  `resultCode` as `/payments`): `details_body` builds it.
"""

from __future__ import annotations

from typing import Any

from .types import ActionRequired, Authorization, is_page_url

__all__ = ["details_body", "redirect_action"]


def redirect_action(document: dict[str, Any], base: Authorization) -> ActionRequired | None:
    """The `ActionRequired` of a shopper-action `/payments` answer `document` whose fields
    (`base`: pspReference, amount, currency, our reference, creation) were read already: its
    `action.url` when the action is a `GET` redirect to an absolute http(s) URL (at most 2048
    ASCII characters); None for any other action (no link to give the shopper)."""
    action = document.get("action")
    if not isinstance(action, dict) or action.get("type") != "redirect":
        return None
    url = action.get("url")
    if action.get("method", "GET") != "GET" or not is_page_url(url):
        return None
    return ActionRequired.waiting(base, url)


def details_body(redirect_result: str) -> dict[str, Any]:
    """The `PaymentDetailsRequest` of a redirect's result."""
    return {"details": {"redirectResult": redirect_result}}

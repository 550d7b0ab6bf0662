"""
Stripe's customer action (3-D Secure by redirect; docs/adr/0049): a PaymentIntent
`requires_action` whose `next_action` is `{"type": "redirect_to_url", "redirect_to_url":
{"url": "https://hooks.stripe.com/...", "return_url": ...}}`, which Stripe answers when the
confirmation carried a `return_url`, decoded as `ActionRequired`.

Any other `next_action` (`use_stripe_sdk`: Stripe.js handles the challenge in the merchant's
page; what Stripe answers without a `return_url`, and what localstripe always answers) gives
no address to send the shopper to: MalformedBody, no outcome yet, as before customer actions.
"""

from __future__ import annotations

from typing import Any

from .types import ActionRequired, Authorization, is_page_url
from .wire import MalformedBody

__all__ = ["redirect_action"]


def redirect_action(document: dict[str, Any], base: Authorization, where: str) -> ActionRequired:
    """The `ActionRequired` of a `requires_action` PaymentIntent `document` whose fields
    (`base`: id, amount, currency, our reference, creation) were read already: its
    `next_action.redirect_to_url.url`, an http(s) URL (Stripe's are https). MalformedBody for
    any other action."""
    action = document.get("next_action")
    action = action if isinstance(action, dict) else {}
    redirect = action.get("redirect_to_url")
    url = redirect.get("url") if isinstance(redirect, dict) else None
    if action.get("type") != "redirect_to_url" or not isinstance(url, str):
        raise MalformedBody(f"{where}: status 'requires_action' without a redirect_to_url")
    if not is_page_url(url):
        raise MalformedBody(f"{where}: field 'next_action.redirect_to_url.url' is not a page URL")
    return ActionRequired.waiting(base, url)

"""``GET /payments/return/<token>``: where the shopper's browser comes back after a customer
action (3-D Secure by redirect; ADR 0049).

Outside merchant authentication (the shopper's browser has no key): the unguessable return
token (``rtok_`` + 256 random bits, ``payments.models.new_return_token``) names the payment,
and it is never logged (the redaction hides its prefix everywhere). The return is a **hint**:
nothing in the query string is believed; the outcome is re-fetched with the acquirer's look-up
(at Adyen, which has none: ``/payments/details`` with the ``redirectResult`` Adyen put in the
query, an opaque result Adyen signed and verifies itself, passed on unread) and recorded
through the state machine (``payments.reconciliation.actions.action_complete``), once,
however often the shopper comes back and whatever notification races it. Then the shopper is
sent on to the merchant's ``return_url`` with ``payment_id`` added to its query (``303 See
Other``, so the browser follows with a GET), whatever the outcome: the merchant reads the
payment (or its webhook event) for the truth. An unknown or malformed token is a ``404``
problem; a failed look-up still redirects (the payment stays ``requires_action`` until a
notification or the expiry sweep ends it).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_safe

from payments.api.problems import problem_response
from payments.models import Payment
from payments.reconciliation.actions import action_complete

__all__ = ["customer_return", "merchant_return_address"]

#: ``rtok_`` and 43 characters of the URL-safe base64 alphabet (``new_return_token``).
_TOKEN = re.compile(r"rtok_[A-Za-z0-9_-]{43}")


class _SeeOther(HttpResponseRedirect):
    """A ``303 See Other`` to the merchant's page (any scheme its ``return_url`` was checked
    to have)."""

    status_code = 303
    allowed_schemes = ["https", "http"]


def merchant_return_address(return_url: str, payment_id: str) -> str:
    """``return_url`` with ``payment_id=<id>`` added to its query (an existing
    ``payment_id`` parameter replaced; the rest kept in order)."""
    parts = urlsplit(return_url)
    query = [(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True)]
    query = [(name, value) for name, value in query if name != "payment_id"]
    query.append(("payment_id", payment_id))
    return urlunsplit(parts._replace(query=urlencode(query)))


@require_safe
def customer_return(request: HttpRequest, token: str) -> HttpResponse:
    """The shopper's return (see the module docstring): ``303`` to the merchant's page, or a
    ``404`` problem ``not_found`` for a token that names no payment."""
    payment = (
        Payment.objects.filter(return_token=token).only("id", "return_url").first()
        if _TOKEN.fullmatch(token)
        else None
    )
    if payment is None or not payment.return_url:
        return problem_response(
            status_code=404,
            code="not_found",
            title="Not found",
            detail="This return address names no payment. Go back to the shop you came from.",
        )
    action_complete(
        payment.pk,
        how="shopper_return",
        redirect_result=request.GET.get("redirectResult"),
        interactive=True,
    )
    response = _SeeOther(merchant_return_address(payment.return_url, payment.pk))
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the token must not leave in a Referer
    return response

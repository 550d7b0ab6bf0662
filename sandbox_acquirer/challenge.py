"""The sandbox's 3-D Secure challenge page: where a shopper approves or denies a charge that
``tok_3ds_challenge`` held for them (``requires_action``).

``GET /challenge/<charge id>`` is a small HTML page with an Approve and a Deny button; each
POSTs the form ``outcome=approve`` or ``outcome=deny`` to the same address, which records the
outcome on the charge (approved, or declined ``authentication_failed``), notifies it as
``charge.authorized`` or ``charge.declined`` (when a notification target is set), and answers
``303 See Other`` to the ``return_url`` the authorization carried, so the shopper's browser
lands there. No API key: the shopper's browser has none (the charge id is the page's only
secret, as a provider's challenge session id is). A charge that is not waiting (answered
already, voided when the action expired, unknown) gets a 404 or 409 page and no redirect.

Pure functions over the app's store; ``app`` routes ``/challenge/`` here. Standard library only.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime
from urllib.parse import parse_qs

from sandbox_acquirer.models import Charge, OperationRefused

__all__ = ["CHALLENGE_PREFIX", "challenge_page", "challenge_url", "parse_outcome"]

#: The challenge page's path prefix; the charge id follows.
CHALLENGE_PREFIX = "/challenge/"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>3-D Secure challenge (sandbox)</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main>
<h1>Sandbox bank: confirm this payment</h1>
<p id="summary">{amount} (minor units) {currency}, charge <code>{charge}</code></p>
<form method="post" action="{action}">
<button id="approve" type="submit" name="outcome" value="approve">Approve</button>
<button id="deny" type="submit" name="outcome" value="deny">Deny</button>
</form>
</main></body></html>
"""

_CLOSED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Challenge closed (sandbox)</title></head>
<body><main><h1 id="closed">This challenge is closed</h1><p>{detail}</p></main></body></html>
"""


def challenge_url(host: str | None, charge_id: str) -> str:
    """The absolute address of ``charge_id``'s challenge page on this sandbox, as the
    client reached it (its ``Host`` header; ``127.0.0.1`` when it sent none)."""
    return f"http://{host or '127.0.0.1'}{CHALLENGE_PREFIX}{charge_id}"


def challenge_page(charge: Charge) -> bytes:
    """The HTML page of a waiting charge's challenge (UTF-8), or the closed page."""
    if charge.status != "requires_action":
        return closed_page(f"The charge is {charge.status}.")
    return _PAGE.format(
        amount=charge.amount,
        currency=html.escape(charge.currency),
        charge=html.escape(charge.id),
        action=html.escape(CHALLENGE_PREFIX + charge.id),
    ).encode("utf-8")


def closed_page(detail: str) -> bytes:
    """The page of a challenge that cannot be answered (unknown, answered, voided)."""
    return _CLOSED.format(detail=html.escape(detail)).encode("utf-8")


def parse_outcome(body: bytes) -> bool:
    """The shopper's answer in a form body: True for ``outcome=approve``, False for
    ``outcome=deny``; ``OperationRefused`` 400 ``invalid_outcome`` otherwise."""
    values = parse_qs(body.decode("ascii", "replace"), keep_blank_values=True).get("outcome")
    if values == ["approve"]:
        return True
    if values == ["deny"]:
        return False
    raise OperationRefused("invalid_outcome", "outcome must be approve or deny.", status=400)


def complete(
    charge: Charge, approve: bool, now: datetime, notify: Callable[[str, Charge], None]
) -> Charge:
    """``charge`` after the shopper's answer (``Charge.challenge_completed``), notified as
    ``charge.authorized`` or ``charge.declined``."""
    done = charge.challenge_completed(approve, now)
    notify("charge.authorized" if done.status == "approved" else "charge.declined", done)
    return done

"""An Adyen-compatible fake of the Checkout API v71, standard library only, run as a separate
process over real HTTP (``python -m tests.support.adyen_fake --port N --api-key K --hmac-key H``;
``tests/support/adyen.py`` starts it and reads it). Stateful enough for the connector's tests:

- ``POST /v71/payments``: a payment per request (a new ``pspReference``), its ``resultCode`` by
  the stored payment method (``paymentMethod.storedPaymentMethodId``: the service sends its
  ``spm_<id>`` as ``<id>``; a sandbox token ``tok_<id>``, which a campaign's acquirer may be
  configured to send here too, is read as ``<id>``): ``decline`` Refused ("Refused",
  code 2), ``insufficient_funds`` Refused ("Not enough balance", 12), ``challenge``
  ChallengeShopper, ``redirect`` RedirectShopper (both without an action), ``pending``
  Pending, ``received`` Received, anything else Authorised (``capture_fails``: its capture
  fails later, ``refund_fails``: its refunds fail later). ``additionalData.manualCapture:
  "true"`` holds it for a capture.
- 3-D Secure by redirect (docs/adr/0049): ``3ds`` answers RedirectShopper with a ``GET``
  redirect ``action`` to the fake's challenge page, ``GET /_fake/challenge/<pspReference>``
  (HTML, Approve and Deny); ``3ds_post`` the same as a ``POST`` redirect with ``data``. The
  page's ``POST`` (``outcome=approve`` or ``deny``) authorises or refuses the payment (and
  notifies AUTHORISATION), then sends the shopper to the payment's ``returnUrl`` with a
  ``redirectResult`` (``303``). ``POST /v71/payments/details`` with
  ``details.redirectResult`` answers the payment's outcome, once per result (a result used
  or unknown is ``422``); a payment canceled while it waited has no challenge any more.
- ``POST /v71/payments/{pspReference}/captures``, ``/cancels``, ``/refunds``: ``201``
  ``"status": "received"``, the outcome decided now and told later by a notification
  (``GET /_fake/notifications``); an unknown payment or an amount above what remains is
  ``422`` (errorCode 167, 137), as Adyen validates them before accepting.
- ``X-API-Key`` checked (``401`` otherwise); ``Idempotency-Key`` honoured: the same key with the
  same path and body replays the first answer (status and body), with another body it is
  ``422`` errorCode ``704``.
- Faults, queued with ``POST /_fake/faults`` (``{"faults": [{"status": 500, "applied": true}]}``):
  each of the next writes is answered ``status`` with a ``ServiceError``, after being applied
  (and stored under its key) when ``applied``, else not applied at all.
- Oracle and journal: ``GET /_fake/payments`` (every payment with its modifications),
  ``GET /_fake/journal`` (every request to ``/v71`` and the answer given, for the tests'
  validation against Adyen's OpenAPI description), ``GET /_fake/notifications`` (the
  notification items so far, HMAC-signed), ``POST /_fake/reset``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode

_PREFIX = "/v71"
_MODIFICATION = re.compile(r"/v71/payments/([A-Za-z0-9]+)/(captures|cancels|refunds)")
_RESULTS = {
    "decline": ("Refused", "Refused", "2"),
    "insufficient_funds": ("Refused", "Not enough balance", "12"),
    "challenge": ("ChallengeShopper", None, None),
    "redirect": ("RedirectShopper", None, None),
    "pending": ("Pending", None, None),
    "received": ("Received", None, None),
}
_EVENTS = {"captures": "CAPTURE", "cancels": "CANCELLATION", "refunds": "REFUND"}
_CHALLENGE = re.compile(r"/_fake/challenge/([A-Za-z0-9]+)")
_REDIRECT_TOKENS = {"3ds": "GET", "3ds_post": "POST"}
_PAGE = """<!doctype html><title>Adyen fake: 3-D Secure</title>
<p>Authenticate the payment {psp}.</p>
<form method="post"><button name="outcome" value="approve">Approve</button>
<button name="outcome" value="deny">Deny</button></form>"""


def _error(status: int, code: str, message: str, error_type: str) -> dict[str, Any]:
    return {"status": status, "errorCode": code, "message": message, "errorType": error_type}


class Fake:
    """The fake's state: payments, idempotency records, queued faults, journal."""

    def __init__(self, api_key: str, hmac_key: str, url: str = "http://127.0.0.1") -> None:
        self.api_key = api_key
        self.url = url
        self.hmac_key = binascii.unhexlify(hmac_key)
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.payments: dict[str, dict[str, Any]] = {}
        self.keys: dict[str, tuple[str, bytes, int, dict[str, Any]]] = {}
        self.faults: list[dict[str, Any]] = []
        self.journal: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.results: dict[str, str] = {}  # redirectResult -> pspReference, until used
        self.ids = itertools.count(1)

    def psp(self) -> str:
        return f"FAKE{next(self.ids):012d}"

    # -- the API ---------------------------------------------------------------------------

    def write(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if headers.get("x-api-key") != self.api_key:
            return 401, _error(401, "000", "HTTP Status Response - Unauthorized", "security")
        fault = self.faults.pop(0) if self.faults else None
        if fault is not None and not fault.get("applied"):
            return fault["status"], _error(fault["status"], "905", "Fault", "internal")
        key = headers.get("idempotency-key")
        if key is not None and key in self.keys:
            stored_path, stored_body, status, answer = self.keys[key]
            if (stored_path, stored_body) != (path, body):
                return 422, _error(
                    422, "704", "request already processed or in progress", "validation"
                )
        else:
            try:
                request = json.loads(body)
            except ValueError:
                return 400, _error(400, "702", "Structure could not be parsed", "validation")
            status, answer = self.apply(path, request)
            if key is not None:
                self.keys[key] = (path, body, status, answer)
        if fault is not None:
            return fault["status"], _error(fault["status"], "905", "Fault", "internal")
        return status, answer

    def apply(self, path: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == f"{_PREFIX}/payments":
            return self.authorize(request)
        if path == f"{_PREFIX}/payments/details":
            return self.details(request)
        match = _MODIFICATION.fullmatch(path)
        if match is None:
            return 404, _error(404, "000", "Not found", "validation")
        return self.modify(match.group(1), match.group(2), request)

    def authorize(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        stored = request["paymentMethod"].get("storedPaymentMethodId", "")
        token = stored.removeprefix("tok_")
        result, reason, code = _RESULTS.get(token, ("Authorised", None, None))
        if token in _REDIRECT_TOKENS:
            result = "RedirectShopper"
        psp = self.psp()
        manual = (request.get("additionalData") or {}).get("manualCapture") == "true"
        amount = request["amount"]
        self.payments[psp] = {
            "pspReference": psp,
            "merchantReference": request["reference"],
            "merchantAccount": request["merchantAccount"],
            "amount": amount,
            "resultCode": result,
            "token": token,
            "manual": manual,
            "captured": 0 if manual else (amount["value"] if result == "Authorised" else 0),
            "refunded": 0,
            "cancelled": False,
            "modifications": [],
            "returnUrl": request["returnUrl"],
        }
        if result in ("Authorised", "Refused"):
            self.notify(psp, None, request["reference"], amount, "AUTHORISATION",
                        result == "Authorised", request["merchantAccount"])  # fmt: skip
        answer: dict[str, Any] = {
            "pspReference": psp,
            "resultCode": result,
            "merchantReference": request["reference"],
            "amount": amount,
        }
        if reason is not None:
            answer |= {"refusalReason": reason, "refusalReasonCode": code}
        if token in _REDIRECT_TOKENS:
            answer["action"] = self.redirect(psp, _REDIRECT_TOKENS[token])
        return 200, answer

    def redirect(self, psp: str, method: str) -> dict[str, Any]:
        """The `CheckoutRedirectAction` to the challenge page of `psp`."""
        action = {"type": "redirect", "method": method, "paymentMethodType": "scheme",
                  "url": f"{self.url}/_fake/challenge/{psp}"}  # fmt: skip
        if method == "POST":
            action["data"] = {"MD": psp, "PaReq": "fake"}
        return action

    def challenge(self, psp: str, outcome: str) -> str | None:
        """The shopper's answer on the challenge page: the payment authorised (approve) or
        refused (deny), notified; returns where the shopper goes next (`returnUrl` with a
        new `redirectResult`), or None when the payment waits for no shopper."""
        payment = self.payments.get(psp)
        if payment is None or payment["resultCode"] != "RedirectShopper" or payment["cancelled"]:
            return None
        approved = outcome == "approve"
        payment["resultCode"] = "Authorised" if approved else "Refused"
        if approved and not payment["manual"]:
            payment["captured"] = payment["amount"]["value"]
        self.notify(psp, None, payment["merchantReference"], payment["amount"],
                    "AUTHORISATION", approved, payment["merchantAccount"])  # fmt: skip
        result = (
            base64.urlsafe_b64encode(
                hmac.new(self.hmac_key, f"{psp}:{outcome}".encode(), hashlib.sha256).digest()
            )
            .decode()
            .rstrip("=")
        )
        self.results[result] = psp
        separator = "&" if "?" in payment["returnUrl"] else "?"
        return payment["returnUrl"] + separator + urlencode({"redirectResult": result})

    def details(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """`/payments/details`: the outcome of the payment a `redirectResult` names, once."""
        result = (request.get("details") or {}).get("redirectResult")
        psp = self.results.pop(result, None) if isinstance(result, str) else None
        if psp is None:
            return 422, _error(422, "000", "Invalid redirectResult", "validation")
        payment = self.payments[psp]
        answer: dict[str, Any] = {
            "pspReference": psp,
            "resultCode": payment["resultCode"],
            "merchantReference": payment["merchantReference"],
            "amount": payment["amount"],
        }
        if payment["resultCode"] == "Refused":
            answer |= {"refusalReason": "3D Not Authenticated", "refusalReasonCode": "11"}
        return 200, answer

    def modify(self, psp: str, action: str, request: dict[str, Any]) -> tuple[int, dict]:
        payment = self.payments.get(psp)
        # A payment still waiting for its shopper may be canceled (the expiry of an action).
        waiting = payment is not None and payment["resultCode"] == "RedirectShopper"
        if payment is None or (
            payment["resultCode"] != "Authorised" and not (waiting and action == "cancels")
        ):
            return 422, _error(
                422, "167", "Original pspReference required for this operation", "validation"
            )
        amount = request.get("amount")
        value = amount["value"] if amount else payment["amount"]["value"]
        if action == "captures":
            ok = payment["manual"] and not payment["captured"] and not payment["cancelled"]
            limit = payment["amount"]["value"]
            ok = ok and payment["token"] != "capture_fails"
        elif action == "refunds":
            limit = payment["captured"] - payment["refunded"]
            ok = payment["token"] != "refund_fails"
        else:
            limit, ok = value, not payment["captured"] and not payment["cancelled"]
        if value > limit:
            return 422, _error(422, "137", "Invalid amount specified", "validation")
        if ok and action == "captures":
            payment["captured"] = value
        elif ok and action == "refunds":
            payment["refunded"] += value
        elif ok:
            payment["cancelled"] = True
        modification = self.psp()
        reference = request.get("reference")
        payment["modifications"].append(
            {"pspReference": modification, "type": action, "amount": value,
             "reference": reference, "success": ok}
        )  # fmt: skip
        event = _EVENTS[action] if ok or action == "cancels" else f"{_EVENTS[action]}_FAILED"
        if amount is None:
            amount = payment["amount"]
        self.notify(modification, psp, reference or payment["merchantReference"],
                    {"currency": amount["currency"], "value": value}, event, ok,
                    request["merchantAccount"])  # fmt: skip
        answer = {
            "merchantAccount": request["merchantAccount"],
            "paymentPspReference": psp,
            "pspReference": modification,
            "status": "received",
        }
        if reference is not None:
            answer["reference"] = reference
        if action != "cancels":
            answer["amount"] = request["amount"]
        return 201, answer

    def notify(self, psp: str, original: str | None, reference: str, amount: dict,
               event: str, success: bool, account: str) -> None:  # fmt: skip
        item = {
            "amount": amount,
            "eventCode": event,
            "merchantAccountCode": account,
            "merchantReference": reference,
            "pspReference": psp,
            "success": "true" if success else "false",
        }
        if original is not None:
            item["originalReference"] = original
        parts = [psp, original or "", account, reference, str(amount["value"]),
                 amount["currency"], event, item["success"]]  # fmt: skip
        digest = hmac.new(self.hmac_key, ":".join(parts).encode(), hashlib.sha256).digest()
        item["additionalData"] = {"hmacSignature": base64.b64encode(digest).decode()}
        self.events.append({"NotificationRequestItem": item})


class Handler(BaseHTTPRequestHandler):
    """One request to the fake (see the module docstring)."""

    disable_nagle_algorithm = True  # the body leaves with its headers: no 40 ms delayed-ACK wait

    fake: Fake
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, document: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _html(self, status: int, page: str, headers: dict[str, str] | None = None) -> None:
        body = page.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        fake = self.fake
        with fake.lock:
            documents = {
                "/_fake/payments": list(fake.payments.values()),
                "/_fake/journal": fake.journal,
                "/_fake/notifications": {"live": "false", "notificationItems": fake.events},
                "/_fake/health": {"ok": True},
            }
            document = documents.get(self.path)
            if document is not None:
                document = json.loads(json.dumps(document))
        challenge = _CHALLENGE.fullmatch(self.path)
        if challenge is not None:
            self._html(200, _PAGE.format(psp=challenge.group(1)))
        elif document is None:
            self._answer(404, {"status": 404})
        else:
            self._answer(200, document)

    def do_POST(self) -> None:
        fake, body = self.fake, self._body()
        if self.path == "/_fake/reset":
            with fake.lock:
                fake.reset()
            self._answer(200, {"ok": True})
            return
        challenge = _CHALLENGE.fullmatch(self.path)
        if challenge is not None:
            outcome = parse_qs(body.decode("ascii", "replace")).get("outcome", [""])[0]
            with fake.lock:
                location = fake.challenge(challenge.group(1), outcome)
            if location is None:
                self._html(410, "<p>This payment waits for no shopper.</p>")
            else:
                self._html(303, "", {"Location": location})
            return
        if self.path == "/_fake/faults":
            with fake.lock:
                fake.faults.extend(json.loads(body)["faults"])
            self._answer(200, {"ok": True})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        with fake.lock:
            status, answer = fake.write(self.path, headers, body)
            fake.journal.append({
                "method": "post", "path": self.path, "body": body.decode("utf-8", "replace"),
                "headers": {name: value for name, value in headers.items()
                            if name in ("idempotency-key", "content-type")},
                "api_key": "x-api-key" in headers, "status": status, "answer": answer,
            })  # fmt: skip
        extra = {"pspReference": answer["pspReference"]} if "pspReference" in answer else {}
        if "idempotency-key" in headers:
            extra["Idempotency-Key"] = headers["idempotency-key"]
        self._answer(status, answer, extra)


def main() -> None:
    """Serve the fake on 127.0.0.1 until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--hmac-key", required=True)
    arguments = parser.parse_args()
    url = f"http://127.0.0.1:{arguments.port}"
    Handler.fake = Fake(arguments.api_key, arguments.hmac_key, url)
    server = ThreadingHTTPServer(("127.0.0.1", arguments.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()

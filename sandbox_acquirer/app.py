"""The sandbox acquirer's endpoints as a plain function: ``SandboxApp.handle(Request) -> Response``.

No sockets here: ``server`` parses HTTP into a ``Request`` and writes the ``Response`` back.
Keeping the two apart lets later fault injection (outage windows, rate limits, capacity
limits) be added as ordinary code around ``handle`` and tested without a network.

Endpoints (details and bodies in ``docs/sandbox.md``):

==========================  ======  ======================================================
path                        auth    methods
==========================  ======  ======================================================
``/healthz``                no      GET -> 200 ``{"status": "ok"}``
``/charges``                Bearer  POST (``Idempotency-Key`` required) -> 201 a charge;
                                    GET ``?reference=R`` -> 200 ``{"data": [charge, ...]}``
``/_sandbox/stats``         no      GET -> 200 counters since the last reset
``/_sandbox/reset``         no      POST -> 200, forgets everything
==========================  ======  ======================================================

Errors are problem-style JSON objects ``{"type", "title", "status", "detail", "code"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from sandbox_acquirer.models import (
    Charge,
    InvalidRequest,
    StoredResponse,
    canonical_json,
    new_charge_id,
    parse_charge_request,
    parse_json_body,
)
from sandbox_acquirer.scenarios import ScenarioSettings, resolve_scenario
from sandbox_acquirer.store import Claimed, KeyInUse, KeyReused, Replay, SandboxStore

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "PROBLEM_TYPE_BASE",
    "Request",
    "Response",
    "SandboxApp",
    "json_response",
    "problem_response",
]

#: Longest accepted ``Idempotency-Key``, in characters.
MAX_IDEMPOTENCY_KEY_LENGTH = 255

#: Problem ``type`` URIs are this plus the error code (``.invalid`` never resolves).
PROBLEM_TYPE_BASE = "https://sandbox-acquirer.invalid/problems/"

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request, already read from the socket.

    ``path`` excludes the query string, ``query`` is the raw text after ``?``; ``headers``
    maps lower-case names to values (repeated headers joined with ``", "``); ``body`` is the
    raw body, at most the server's body limit.
    """

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] | None = None
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or ``None`` if absent."""
        return (self.headers or {}).get(name.lower())


@dataclass(frozen=True, slots=True)
class Response:
    """One HTTP response: ``status``, ``body`` bytes and extra ``headers``.

    ``Content-Type`` comes from ``content_type``; the server adds ``Content-Length``.
    """

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = JSON


def json_response(status: int, value: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A response with ``value`` serialised as compact UTF-8 JSON (insertion order kept)."""
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return Response(status=status, body=body, headers=headers)


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    headers: tuple[tuple[str, str], ...] = (),
) -> Response:
    """A problem-style error: ``{"type", "title", "status", "detail", "code"}``.

    ``code`` is a stable machine-readable name (``invalid_request``,
    ``idempotency_key_reused``, ...); ``type`` is ``PROBLEM_TYPE_BASE + code``.
    """
    problem = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    return json_response(status, problem, headers)


def _invalid(detail: str, title: str = "The request is invalid") -> Response:
    return problem_response(400, "invalid_request", title, detail)


Handler = Callable[["SandboxApp", Request], Response]


class SandboxApp:
    """The endpoints, over a ``SandboxStore``.

    ``api_keys``: the accepted bearer keys, each its own account (idempotency keys and
    charges are scoped per API key). ``wait(seconds)`` is how scenarios pause (the server
    passes one that returns early on shutdown; tests may pass a fake).
    """

    def __init__(
        self,
        *,
        store: SandboxStore,
        api_keys: Sequence[str],
        scenario_settings: ScenarioSettings | None = None,
        wait: Callable[[float], object] = time.sleep,
    ) -> None:
        if not api_keys or any(not key for key in api_keys):
            raise ValueError("at least one non-empty API key is required")
        self.store = store
        # Accounts are named by position, so the keys themselves never need to appear
        # anywhere but in this mapping.
        self._accounts = {key: f"acct_{index}" for index, key in enumerate(api_keys, 1)}
        self._scenario_settings = scenario_settings or ScenarioSettings()
        self._wait = wait

    # -- dispatch ---------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer ``request``. May block for as long as its scenario says."""
        methods = _ROUTES.get(request.path)
        if methods is None:
            return problem_response(
                404, "not_found", "Not Found", f"No endpoint at {request.path}."
            )
        handler = methods.get(request.method)
        if handler is None:
            allowed = ", ".join(sorted(methods))
            return problem_response(
                405,
                "method_not_allowed",
                "Method Not Allowed",
                f"{request.path} accepts {allowed}.",
                headers=(("Allow", allowed),),
            )
        return handler(self, request)

    @staticmethod
    def counts_towards_stats(path: str) -> bool:
        """Whether a request to ``path`` is counted in ``requests_total``.

        Health checks and the ``/_sandbox/`` control endpoints are not, so polling them
        does not disturb what a test measures.
        """
        return path != "/healthz" and not path.startswith("/_sandbox/")

    # -- endpoints ----------------------------------------------------------------------

    def _healthz(self, request: Request) -> Response:
        return json_response(200, {"status": "ok"})

    def _stats(self, request: Request) -> Response:
        return json_response(200, self.store.stats())

    def _reset(self, request: Request) -> Response:
        self.store.reset()
        return json_response(200, {"status": "reset"})

    def _list_charges(self, request: Request) -> Response:
        account = self._authenticate(request)
        if isinstance(account, Response):
            return account
        references = parse_qs(request.query, keep_blank_values=True).get("reference", [])
        if len(references) != 1 or not references[0]:
            return _invalid("Give exactly one non-empty reference query parameter.")
        charges = self.store.charges_for(account, references[0])
        return json_response(200, {"data": [charge.to_json() for charge in charges]})

    def _create_charge(self, request: Request) -> Response:
        account = self._authenticate(request)
        if isinstance(account, Response):
            return account
        key = _idempotency_key(request)
        if isinstance(key, Response):
            return key
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != JSON:
            return problem_response(
                415,
                "unsupported_media_type",
                "Unsupported Media Type",
                "Send the body as application/json.",
            )
        try:
            charge_request = parse_charge_request(parse_json_body(request.body))
            scenario = resolve_scenario(charge_request.payment_method, self._scenario_settings)
        except InvalidRequest as exc:
            return _invalid(exc.detail)

        fingerprint = hashlib.sha256(
            b"POST /charges\n" + canonical_json(charge_request.as_dict())
        ).hexdigest()
        outcome = self.store.begin(account, key, fingerprint)
        if not isinstance(outcome, Claimed):
            return _answer_known_key(outcome)
        claim = outcome.claim

        try:
            if scenario.hold_key_seconds:
                self._wait(scenario.hold_key_seconds)
            charge = Charge(
                id=new_charge_id(),
                status=scenario.status,
                decline_code=scenario.decline_code,
                amount=charge_request.amount,
                currency=charge_request.currency,
                reference=charge_request.reference,
                created_at=self.store.now(),
            )
            created = json_response(201, charge.to_json())
            self.store.commit(claim, charge, StoredResponse(status=201, body=created.body))
        except BaseException:
            self.store.release(claim)
            raise

        if scenario.reply_delay_seconds:
            self._wait(scenario.reply_delay_seconds)
        if scenario.reply == "server_error":
            return problem_response(
                500, "api_error", "Internal Server Error", "The acquirer failed unexpectedly."
            )
        return created

    # -- helpers ----------------------------------------------------------------------

    def _authenticate(self, request: Request) -> str | Response:
        """The caller's account, or a 401 response."""
        authorization = request.header("authorization")
        challenge = (("WWW-Authenticate", 'Bearer realm="sandbox-acquirer"'),)
        if not authorization:
            return problem_response(
                401,
                "authentication_required",
                "Unauthorized",
                "Send Authorization: Bearer <API key>.",
                headers=challenge,
            )
        scheme, _, credentials = authorization.strip().partition(" ")
        presented = credentials.strip().encode("utf-8", "replace")
        account = None
        if scheme.lower() == "bearer":
            # Compare with every key in constant time, so timing reveals nothing.
            for key, candidate in self._accounts.items():
                if hmac.compare_digest(presented, key.encode("utf-8")):
                    account = candidate
        if account is None:
            return problem_response(
                401,
                "invalid_api_key",
                "Unauthorized",
                "The API key is not valid.",
                headers=challenge,
            )
        return account


def _idempotency_key(request: Request) -> str | Response:
    """The request's ``Idempotency-Key``, or a 400 response.

    Accepted: 1 to 255 printable ASCII characters (``!`` to ``~``, so no spaces), after
    stripping surrounding spaces and tabs. Keys are case-sensitive and taken literally
    (quotes included), as by Stripe-style acquirers.
    """
    raw = request.header("idempotency-key")
    if raw is None:
        return _invalid(
            "Send an Idempotency-Key header with POST /charges.", "Idempotency-Key is missing"
        )
    key = raw.strip(" \t")
    if not (1 <= len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH) or not all(
        "!" <= char <= "~" for char in key
    ):
        return _invalid(
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII "
            "characters without spaces.",
            "Idempotency-Key is invalid",
        )
    return key


def _answer_known_key(outcome: Replay | KeyReused | KeyInUse) -> Response:
    """The answer when the key was already there: a replay, a 422 or a 409."""
    match outcome:
        case Replay(response=stored):
            return Response(
                status=stored.status,
                body=stored.body,
                headers=(("Idempotent-Replayed", "true"),),
                content_type=stored.content_type,
            )
        case KeyReused():
            return problem_response(
                422,
                "idempotency_key_reused",
                "Idempotency-Key is already used",
                "This Idempotency-Key was used with a different request.",
            )
        case KeyInUse():
            return problem_response(
                409,
                "idempotency_key_in_use",
                "A request is outstanding for this Idempotency-Key",
                "A request with this Idempotency-Key is still being processed; retry later.",
                headers=(("Retry-After", "1"),),
            )


_ROUTES: dict[str, dict[str, Handler]] = {
    "/healthz": {"GET": SandboxApp._healthz},
    "/charges": {"GET": SandboxApp._list_charges, "POST": SandboxApp._create_charge},
    "/_sandbox/stats": {"GET": SandboxApp._stats},
    "/_sandbox/reset": {"POST": SandboxApp._reset},
}

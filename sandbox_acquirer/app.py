"""The sandbox acquirer's endpoints as a plain function: ``SandboxApp.handle(Request) -> Response``.

No sockets here: ``server`` parses HTTP into a ``Request`` and writes the ``Response`` back
(or, for a ``Response`` whose ``action`` is ``reset``/``close``/``refused``, drops the
connection without an answer; ``trickle_seconds_per_byte`` paces the body).

Endpoints (details and bodies in ``docs/sandbox.md``):

=====================================  ======  ==============================================
path                                   auth    methods
=====================================  ======  ==============================================
``/healthz``                           no      GET -> 200 ``{"status": "ok"}``
``/charges``                           Bearer  POST (``Idempotency-Key`` required) -> 201 a
                                               charge; GET ``?reference=R`` -> 200
                                               ``{"data": [charge, ...]}``
``/charges/<id>/capture``              Bearer  POST (``Idempotency-Key``) ``{}`` or
                                               ``{"amount": N}`` -> 200 the charge
``/charges/<id>/void``                 Bearer  POST (``Idempotency-Key``) ``{}`` -> 200 the charge
``/refunds``                           Bearer  POST (``Idempotency-Key``) ``{"charge", "reference",
                                               "amount"?}`` -> 201 a refund; GET
                                               ``?reference=R`` -> 200 ``{"data": [refund, ...]}``
``/_sandbox/stats``, ``/_sandbox/export``  no  GET -> 200 counters (``?format=csv`` for CSV)
``/_sandbox/reset``                    no      POST -> 200, forgets everything
``/_sandbox/charges``                  Bearer  GET ``?since=&starting_after=&limit=`` -> 200
                                               ``{"data": [charge, ...], "has_more"}``: the
                                               caller's charges, oldest first (no lag)
``/_sandbox/refunds``                  Bearer  GET, the same for the caller's refunds
``/_sandbox/conditions``               no      GET -> every condition; DELETE -> clears them
``/_sandbox/conditions/<name>``        no      GET; POST or PUT a JSON object -> sets it;
                                               DELETE -> clears it
``/_sandbox/notifications``            no      GET -> the sender's counters and target; PUT
                                               ``{"url", "secrets", ...}`` -> sends from now
                                               on; DELETE -> stops (``notifications.py``)
``/_sandbox/disputes``                 no      POST ``{"charge", "amount"?, "reason"?}`` -> 201
                                               a dispute, notified ``dispute.created``
``/_sandbox/disputes/<id>``            no      POST ``{"status"}`` -> 200, notified
                                               ``dispute.updated`` or ``dispute.closed``
``/challenge/<charge id>``             no      GET -> the 3-D Secure challenge page (HTML);
                                               POST ``outcome=approve|deny`` -> 303 to the
                                               charge's ``return_url`` (``challenge.py``)
=====================================  ======  ==============================================

Every POST of the acquirer API runs the same steps (``_execute``): count the attempt per
idempotency key and answer the token's failure for the first ``n``; claim the key (a replay,
422 or 409 otherwise); wait; record (a capture, void or refund checks the acquirer's rules
atomically with the recording: a refusal is a 404/422 that leaves the key free); wait;
reply (the resource, a 500, a dropped connection or a trickle). Captures, voids and refunds
take their faults from the charge's token (``capture_<fault>`` segments, see ``scenarios``).

A request to the acquirer API (``conditions.ENDPOINTS``) passes, in order: the
capacity limit, an outage or flapping window failing "before commit", authentication, the
per-API-key rate limit, the latency draw, then the endpoint (with its per-payment scenario);
an outage or flapping window failing "after commit" replaces the answer afterwards. Whether a
window is failing is decided once, when the request arrives.

Errors are problem-style JSON objects ``{"type", "title", "status", "detail", "code"}``.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs

from sandbox_acquirer import challenge
from sandbox_acquirer.conditions import (
    CONDITION_NAMES,
    ENDPOINTS,
    ConditionError,
    ConditionSet,
)
from sandbox_acquirer.faults import PROBLEMS, Fault, retry_after_value
from sandbox_acquirer.models import (
    Charge,
    InvalidRequest,
    OperationRefused,
    Refund,
    StoredResponse,
    canonical_json,
    new_charge_id,
    new_refund_id,
    parse_capture_request,
    parse_charge_request,
    parse_json_body,
    parse_refund_request,
    parse_void_request,
)
from sandbox_acquirer.notifications import DisputeBook, NotificationTarget, Notifier
from sandbox_acquirer.scenarios import (
    Operation,
    Scenario,
    ScenarioSettings,
    TokenPlan,
    resolve_token,
)
from sandbox_acquirer.store import Claim, Claimed, KeyInUse, KeyReused, Replay, SandboxStore

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "PROBLEM_TYPE_BASE",
    "Request",
    "Response",
    "SandboxApp",
    "fault_response",
    "json_response",
    "problem_response",
    "stats_csv",
    "valid_idempotency_key",
]

#: Longest accepted ``Idempotency-Key``, in characters.
MAX_IDEMPOTENCY_KEY_LENGTH = 255

#: Page size of ``GET /_sandbox/charges``: default and largest ``limit``.
LEDGER_PAGE_DEFAULT = 1000
LEDGER_PAGE_MAX = 10000

#: Problem ``type`` URIs are this plus the error code (``.invalid`` never resolves).
PROBLEM_TYPE_BASE = "https://sandbox-acquirer.invalid/problems/"

JSON = "application/json"
CSV = "text/csv; charset=utf-8"

#: What the server does with a response: write it, or drop the connection without an answer
#: (``reset``: TCP RST after reading the request; ``close``: FIN; ``refused``: RST before the
#: request body is read).
Action = Literal["respond", "reset", "close", "refused"]


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
    ``action`` other than ``respond`` drops the connection instead (``status`` is then 0).
    ``trickle_seconds_per_byte`` > 0 makes the server send the body one byte at a time.
    """

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = JSON
    action: Action = "respond"
    trickle_seconds_per_byte: float = 0.0

    @property
    def answered(self) -> bool:
        """Whether the client gets an HTTP answer at all."""
        return self.action == "respond"


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


def fault_response(fault: Fault, now_epoch: float) -> Response:
    """The answer for an injected ``fault`` at ``now_epoch``.

    A status fault gets its plausible problem body (``faults.PROBLEMS``) and, if set, its
    ``Retry-After``; 401 adds ``WWW-Authenticate``; 409 has ``Retry-After: 1`` like the real
    one. Connection faults become a ``Response`` with that ``action``.
    """
    if fault.kind != "status":
        return Response(status=0, body=b"", action=fault.kind)
    assert fault.status is not None
    code, title, detail = PROBLEMS[fault.status]
    headers: list[tuple[str, str]] = []
    if fault.retry_after_seconds is not None:
        headers.append(
            (
                "Retry-After",
                retry_after_value(fault.retry_after_seconds, fault.retry_after_format, now_epoch),
            )
        )
    elif fault.status == 409:
        headers.append(("Retry-After", "1"))
    if fault.status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="sandbox-acquirer"'))
    return problem_response(fault.status, code, title, detail, headers=tuple(headers))


def _invalid(detail: str, title: str = "The request is invalid") -> Response:
    return problem_response(400, "invalid_request", title, detail)


def valid_idempotency_key(raw: str | None) -> str | None:
    """``raw`` stripped of surrounding spaces and tabs if it is a valid key, else ``None``.

    Accepted: 1 to 255 printable ASCII characters (``!`` to ``~``, so no spaces). Keys are
    case-sensitive and taken literally (quotes included), as by Stripe-style acquirers.
    """
    if raw is None:
        return None
    key = raw.strip(" \t")
    if not (1 <= len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH) or not all(
        "!" <= char <= "~" for char in key
    ):
        return None
    return key


Handler = Callable[["SandboxApp", Request], Response]
_Body = TypeVar("_Body")
#: A capture's, void's or refund's change: ``(charge, now, scenario) -> (charge, refund)``.
_Rule = Callable[[Charge, datetime, Scenario], tuple[Charge, Refund | None]]
AcquirerHandler = Callable[["SandboxApp", Request, str], Response]


class SandboxApp:
    """The endpoints, over a ``SandboxStore`` and a ``ConditionSet``.

    ``api_keys``: the accepted bearer keys, each its own account (idempotency keys and
    charges are scoped per API key). ``wait(seconds)`` is how scenarios and conditions pause
    (the server passes one that returns early on shutdown; tests may pass a fake).
    ``conditions`` holds the acquirer-wide conditions (an empty set by default).
    """

    def __init__(
        self,
        *,
        store: SandboxStore,
        api_keys: Sequence[str],
        scenario_settings: ScenarioSettings | None = None,
        conditions: ConditionSet | None = None,
        wait: Callable[[float], object] = time.sleep,
        notifier: Notifier | None = None,
    ) -> None:
        if not api_keys or any(not key for key in api_keys):
            raise ValueError("at least one non-empty API key is required")
        self.store = store
        # Accounts are named by position, so the keys themselves never need to appear
        # anywhere but in this mapping.
        self._accounts = {key: f"acct_{index}" for index, key in enumerate(api_keys, 1)}
        self._scenario_settings = scenario_settings or ScenarioSettings()
        self.conditions = conditions or ConditionSet()
        self.conditions.reset(self._epoch())
        self._wait = wait
        self.notifier = notifier or Notifier()
        self.disputes = DisputeBook()

    # -- dispatch ---------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer ``request``. May block for as long as its scenario or conditions say."""
        if request.path.startswith(challenge.CHALLENGE_PREFIX):
            return self._challenge(request, request.path[len(challenge.CHALLENGE_PREFIX) :])
        if request.path.startswith(_CONDITION_PREFIX):
            return self._condition(request, request.path[len(_CONDITION_PREFIX) :])
        if request.path.startswith(_DISPUTE_PREFIX):
            if request.method != "POST":
                return _method_not_allowed(request.path, {"POST": None})
            return self._dispute_move(request, request.path[len(_DISPUTE_PREFIX) :])
        route = _route(request.path)
        methods = _ROUTES.get(route)
        if methods is None:
            return problem_response(
                404, "not_found", "Not Found", f"No endpoint at {request.path}."
            )
        if request.method not in methods:
            return _method_not_allowed(request.path, methods)
        handler = methods[request.method]
        if handler is None:
            endpoint = f"{request.method} {route}"
            return self._acquirer_call(endpoint, _ACQUIRER_HANDLERS[endpoint], request)
        return handler(self, request)

    @staticmethod
    def counts_towards_stats(path: str) -> bool:
        """Whether a request to ``path`` is counted in ``requests_total``.

        Health checks and the ``/_sandbox/`` control endpoints are not, so polling them
        does not disturb what a test measures.
        """
        return path != "/healthz" and not path.startswith(("/_sandbox/", "/challenge/"))

    @staticmethod
    def endpoint_label(method: str, path: str) -> str:
        """The stats and conditions label of a request: one of ``conditions.ENDPOINTS``
        (``"POST /charges"``, ``"POST /charges/{id}/capture"``, ...; a charge id becomes
        ``{id}``) or ``"other"`` (unknown paths share one label, so the table stays small)."""
        endpoint = f"{method} {_route(path)}"
        return endpoint if endpoint in ENDPOINTS else "other"

    def refuses_connection(self, method: str, path: str) -> bool:
        """Whether an outage or flapping window says to refuse this request unread."""
        endpoint = self.endpoint_label(method, path)
        if endpoint not in ENDPOINTS:
            return False
        return self.conditions.refuses(self._epoch(), endpoint)

    def _epoch(self) -> float:
        return self.store.now().timestamp()

    # -- the acquirer API under conditions ------------------------------------------------

    def _acquirer_call(self, endpoint: str, handler: AcquirerHandler, request: Request) -> Response:
        in_flight = self.store.enter_request()
        try:
            now = self._epoch()
            capacity = self.conditions.admit(now, in_flight)
            if not capacity.admitted:
                if capacity.delay_seconds:
                    self._wait(capacity.delay_seconds)
                return self._fault(
                    Fault(
                        kind="status",
                        status=503,
                        retry_after_seconds=capacity.retry_after,
                        reason="capacity",
                    ),
                    now,
                )
            before = self.conditions.window_fault(now, endpoint, "before_commit")
            if before is not None:
                return self._fault(before, now)
            after = self.conditions.window_fault(now, endpoint, "after_commit")

            account = self._authenticate(request)
            if isinstance(account, Response):
                return account
            rate = self.conditions.rate_limit(account, endpoint, now)
            if not rate.allowed:
                self.store.count_fault("rate_limit")
                return self._rate_limited(rate.mode, rate.retry_after, rate.headers)

            delay = self.conditions.latency()
            if delay:
                self._wait(delay)
            response = handler(self, request, account)
            if after is not None:
                response = self._fault(after, now)
            if rate.headers and response.answered:
                response = replace(response, headers=response.headers + rate.headers)
            return response
        finally:
            self.store.leave_request()

    def _fault(self, fault: Fault, now: float) -> Response:
        self.store.count_fault(fault.reason)
        return fault_response(fault, now)

    @staticmethod
    def _rate_limited(
        mode: str, retry_after: int | None, headers: tuple[tuple[str, str], ...]
    ) -> Response:
        extra = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
        if mode == "secondary":
            return problem_response(
                403,
                "secondary_rate_limit",
                "Forbidden",
                "You have exceeded a secondary rate limit. Wait before retrying.",
                headers=extra,
            )
        return problem_response(
            429,
            "rate_limited",
            "Too Many Requests",
            "The API key's rate limit is exhausted; retry after the window resets.",
            headers=extra + headers,
        )

    # -- endpoints ----------------------------------------------------------------------

    def _healthz(self, request: Request) -> Response:
        return json_response(200, {"status": "ok"})

    def _stats(self, request: Request) -> Response:
        formats = parse_qs(request.query, keep_blank_values=True).get("format", ["json"])
        if len(formats) != 1 or formats[0] not in ("json", "csv"):
            return _invalid("format must be json or csv.")
        stats = self.store.stats()
        if formats[0] == "csv":
            return Response(
                status=200,
                body=stats_csv(stats).encode("utf-8"),
                content_type=CSV,
                headers=(("Content-Disposition", 'inline; filename="sandbox-stats.csv"'),),
            )
        return json_response(200, stats)

    def _reset(self, request: Request) -> Response:
        self.store.reset()
        self.disputes.reset()
        self.conditions.reset(self._epoch())
        return json_response(200, {"status": "reset"})

    def _list_charges(self, request: Request, account: str) -> Response:
        return _list_by_reference(
            request, lambda reference: self.store.charges_for(account, reference)
        )

    def _list_refunds(self, request: Request, account: str) -> Response:
        return _list_by_reference(
            request, lambda reference: self.store.refunds_for(account, reference)
        )

    def _create_charge(self, request: Request, account: str) -> Response:
        prepared = _prepare(request, parse_charge_request, allow_empty=False)
        if isinstance(prepared, Response):
            return prepared
        key, charge_request = prepared
        try:
            plan = resolve_token(charge_request.payment_method, self._scenario_settings)
        except InvalidRequest as exc:
            return _invalid(exc.detail)
        scenario = plan.authorization
        # A body without "capture" gets today's answer, byte for byte.
        lifecycle = charge_request.capture is not None

        def record(claim: Claim) -> Response:
            charge_id = new_charge_id()
            status, decline_code, action_url = scenario.status, scenario.decline_code, None
            if scenario.challenge and charge_request.return_url is not None:
                status = "requires_action"
                action_url = challenge.challenge_url(request.header("host"), charge_id)
            elif scenario.challenge:  # nobody can come back from a challenge
                status, decline_code = "declined", "shopper_action_required"
            charge = Charge.record(
                id=charge_id,
                status=status,
                decline_code=decline_code,
                request=charge_request,
                created_at=self.store.now(),
                action_url=action_url,
            )
            created = json_response(201, charge.to_json(lifecycle=lifecycle))
            self.store.commit(
                claim,
                charge,
                StoredResponse(status=201, body=created.body),
                visible_after=timedelta(seconds=scenario.lookup_lag_seconds),
                plan=plan,
            )
            if charge.status != "requires_action":
                kind = "charge.authorized" if charge.status == "approved" else "charge.declined"
                self.notifier.emit(kind, charge.to_json(), charge.created_at)
            return created

        return self._execute(
            account, key, "POST /charges", charge_request.as_dict(), scenario, record, "tok_"
        )

    def _capture(self, request: Request, account: str) -> Response:
        return self._charge_operation(
            request,
            account,
            "capture",
            parse_capture_request,
            lambda body: lambda charge, now, _: (charge.captured_by(body.amount, now), None),
        )

    def _void(self, request: Request, account: str) -> Response:
        return self._charge_operation(
            request,
            account,
            "void",
            parse_void_request,
            lambda body: lambda charge, now, _: (charge.voided_at_time(now), None),
        )

    def _charge_operation(
        self,
        request: Request,
        account: str,
        kind: Operation,
        parse: Callable[[Any], Any],
        rule: Callable[[Any], _Rule],
    ) -> Response:
        """``POST /charges/{id}/capture`` or ``/void``: ``rule(body)`` is the change."""
        prepared = _prepare(request, parse, allow_empty=True)
        if isinstance(prepared, Response):
            return prepared
        key, body = prepared
        return self._operate(
            account, key, request.path, body.as_dict(), _charge_id(request.path), kind, rule(body)
        )

    def _create_refund(self, request: Request, account: str) -> Response:
        prepared = _prepare(request, parse_refund_request, allow_empty=False)
        if isinstance(prepared, Response):
            return prepared
        key, refund_request = prepared

        def apply(charge: Charge, now: datetime, scenario: Scenario) -> tuple[Charge, Refund]:
            amount = charge.refundable(refund_request.amount)
            failed = scenario.status == "declined"
            refund = Refund(
                id=new_refund_id(),
                charge=charge.id,
                amount=amount,
                currency=charge.currency,
                reference=refund_request.reference,
                status="failed" if failed else "succeeded",
                failure_code=scenario.decline_code if failed else None,
                created_at=now,
            )
            return (charge if failed else charge.refunded_by(amount)), refund

        return self._operate(
            account,
            key,
            "/refunds",
            refund_request.as_dict(),
            refund_request.charge,
            "refund",
            apply,
        )

    def _operate(
        self,
        account: str,
        key: str,
        path: str,
        body: dict[str, Any],
        charge_id: str,
        kind: Operation,
        apply: _Rule,
    ) -> Response:
        """A capture, void or refund of ``charge_id``: its scenario comes from the
        charge's token (``plan.operation(kind)``); ``apply(charge, now, scenario)``
        enforces the rules (raising ``OperationRefused``) and returns the new charge (and
        the refund)."""
        try:
            snapshot, plan = self.store.charge_plan(account, charge_id)
        except OperationRefused as exc:
            return _refused(exc)
        scenario = (plan if isinstance(plan, TokenPlan) else TokenPlan()).operation(kind)

        def rule(charge: Charge, now: datetime) -> tuple[Charge, Refund | None]:
            return apply(charge, now, scenario)

        status = 201 if kind == "refund" else 200

        def render(charge: Charge, refund: Refund | None) -> Response:
            return json_response(status, (refund or charge).to_json())

        def record(claim: Claim) -> Response:
            rendered: list[Response] = []

            recorded: list[tuple[Charge, Refund | None]] = []

            def store_render(charge: Charge, refund: Refund | None) -> StoredResponse:
                rendered.append(render(charge, refund))
                recorded.append((charge, refund))
                return StoredResponse(status=status, body=rendered[0].body)

            result = self.store.commit_operation(
                claim,
                kind,
                charge_id,
                rule,
                store_render,
                visible_after=timedelta(seconds=scenario.lookup_lag_seconds),
            )
            if result is None:  # a reset raced this request: answer, record nothing
                return render(*rule(snapshot, self.store.now()))
            self._notify_operation(kind, *recorded[0])
            return rendered[0]

        return self._execute(account, key, f"POST {path}", body, scenario, record, f"tok_{kind}_")

    def _notify_operation(self, kind: Operation, charge: Charge, refund: Refund | None) -> None:
        now = self.store.now()
        if refund is not None:
            self.notifier.emit(f"refund.{refund.status}", refund.to_json(), now)
        else:
            event = "charge.captured" if kind == "capture" else "charge.voided"
            self.notifier.emit(event, charge.to_json(), now)

    def _execute(
        self,
        account: str,
        key: str,
        route: str,
        body: dict[str, Any],
        scenario: Scenario,
        record: Callable[[Claim], Response],
        fault_prefix: str,
    ) -> Response:
        """Run one POST of the acquirer API under its idempotency key, as ``scenario``
        says (see the module docstring): ``record(claim)`` records the result, completes
        the key and returns the answer, or raises ``OperationRefused`` (answered, nothing
        recorded, key released). ``route`` and ``body`` make the fingerprint, so the same
        key on another route or with another body is ``idempotency_key_reused``.
        ``fault_prefix`` names the token faults in ``faults_injected`` (``tok_`` for an
        authorization: ``tok_fail``; ``tok_capture_``: ``tok_capture_fail``)."""
        attempt = self.store.count_attempt(account, key)
        if scenario.failure is not None and attempt <= scenario.fail_attempts:
            failure = scenario.failure
            return self._fault(
                replace(failure, reason=fault_prefix + failure.reason.removeprefix("tok_")),
                self._epoch(),
            )

        fingerprint = hashlib.sha256(
            route.encode("utf-8") + b"\n" + canonical_json(body)
        ).hexdigest()
        outcome = self.store.begin(account, key, fingerprint)
        if not isinstance(outcome, Claimed):
            return _answer_known_key(outcome)
        claim = outcome.claim

        try:
            if scenario.hold_key_seconds:
                self._wait(scenario.hold_key_seconds)
            answer = record(claim)
        except OperationRefused as exc:
            self.store.release(claim)
            return _refused(exc)
        except BaseException:
            self.store.release(claim)
            raise

        if scenario.reply_delay_seconds:
            self._wait(scenario.reply_delay_seconds)
        if scenario.reply == "server_error":
            self.store.count_fault(f"{fault_prefix}500_after_commit")
            return problem_response(
                500, "api_error", "Internal Server Error", "The acquirer failed unexpectedly."
            )
        if scenario.reply in ("reset", "close"):
            self.store.count_fault(f"{fault_prefix}{scenario.reply}_after_commit")
            return Response(status=0, body=b"", action=scenario.reply)
        if scenario.trickle_seconds_per_byte:
            return replace(answer, trickle_seconds_per_byte=scenario.trickle_seconds_per_byte)
        return answer

    def _charge_ledger(self, request: Request) -> Response:
        """``GET /_sandbox/charges``: the caller's recorded charges (with their capture
        state now), oldest first, paged; the settlement report an audit reads (no lookup
        lag, no conditions, not counted)."""
        return self._listing(request, self.store.ledger, "charges")

    def _refund_ledger(self, request: Request) -> Response:
        """``GET /_sandbox/refunds``: the caller's recorded refunds, as ``_charge_ledger``."""
        return self._listing(request, self.store.refund_ledger, "refunds")

    def _listing(
        self,
        request: Request,
        pager: Callable[..., tuple[list[tuple[str, Any]], bool]],
        noun: str,
    ) -> Response:
        account = self._authenticate(request)
        if isinstance(account, Response):
            return account
        query = parse_qs(request.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"since", "starting_after", "limit"})
        if unknown or any(len(values) != 1 for values in query.values()):
            return _invalid("Give at most one each of since, starting_after and limit.")
        since = None
        if "since" in query:
            try:
                since = datetime.fromisoformat(query["since"][0])
            except ValueError:
                since = None
            if since is None or since.tzinfo is None:
                return _invalid("since must be an RFC 3339 time with an offset, e.g. ...Z.")
        raw_limit = query.get("limit", [str(LEDGER_PAGE_DEFAULT)])[0]
        if not (raw_limit.isascii() and raw_limit.isdigit()) or not (
            1 <= int(raw_limit) <= LEDGER_PAGE_MAX
        ):
            return _invalid(f"limit must be an integer from 1 to {LEDGER_PAGE_MAX}.")
        starting_after = query.get("starting_after", [None])[0]
        try:
            page, has_more = pager(
                account, since=since, starting_after=starting_after, limit=int(raw_limit)
            )
        except KeyError:
            return _invalid(f"starting_after is not the id of one of your {noun}.")
        data = [{**item.to_json(), "idempotency_key": key} for key, item in page]
        return json_response(200, {"data": data, "has_more": has_more})

    # -- control API: conditions -----------------------------------------------------------

    def _conditions(self, request: Request) -> Response:
        if request.method == "GET":
            return json_response(200, self.conditions.to_json())
        self.conditions.clear()
        return json_response(200, self.conditions.to_json())

    def _condition(self, request: Request, name: str) -> Response:
        path = request.path
        if name not in CONDITION_NAMES:
            return problem_response(
                404,
                "not_found",
                "Not Found",
                f"No condition named {name[:64]!r}; known: {', '.join(CONDITION_NAMES)}.",
            )
        if request.method == "GET":
            condition = self.conditions.get(name)
            return json_response(200, {name: condition.to_json() if condition else None})
        if request.method == "DELETE":
            self.conditions.clear(name)
            return json_response(200, {name: None})
        if request.method not in ("POST", "PUT"):
            return _method_not_allowed(path, dict.fromkeys(("GET", "POST", "PUT", "DELETE")))
        try:
            data = parse_json_body(request.body)
            condition = self.conditions.set(name, data, self._epoch())
        except InvalidRequest as exc:
            return _invalid(exc.detail, "The condition is invalid")
        except ConditionError as exc:
            return _invalid(exc.detail, "The condition is invalid")
        return json_response(200, {name: condition.to_json()})

    # -- notifications and disputes (notifications.py) -----------------------------------

    def _notifications(self, request: Request) -> Response:
        if request.method == "PUT":
            try:
                target = NotificationTarget.from_json(parse_json_body(request.body))
            except InvalidRequest as exc:
                return _invalid(exc.detail, "The notification target is invalid")
            self.notifier.configure(target)
        elif request.method == "DELETE":
            self.notifier.configure(None)
        return json_response(200, self.notifier.stats())

    def _dispute_open(self, request: Request) -> Response:
        try:
            data = parse_json_body(request.body)
            charge_id = data.get("charge") if isinstance(data, dict) else None
            dispute = self.disputes.open(
                self._any_charge(str(charge_id)).to_json(), data, self.store.now()
            )
        except InvalidRequest as exc:
            return _invalid(exc.detail, "The dispute is invalid")
        except OperationRefused as exc:
            return _refused(exc)
        self.notifier.emit("dispute.created", dispute, self.store.now())
        return json_response(201, dispute)

    def _dispute_move(self, request: Request, dispute_id: str) -> Response:
        try:
            event, dispute = self.disputes.move(dispute_id, parse_json_body(request.body))
        except InvalidRequest as exc:
            return _invalid(exc.detail, "The dispute change is invalid")
        except OperationRefused as exc:
            return _refused(exc)
        self.notifier.emit(event, dispute, self.store.now())
        return json_response(200, dispute)

    def _challenge(self, request: Request, charge_id: str) -> Response:
        """``GET`` or ``POST /challenge/<charge id>`` (``challenge.py``): the page, or the
        shopper's answer recorded and a 303 to the charge's ``return_url``."""
        html_type = "text/html; charset=utf-8"
        if request.method not in ("GET", "POST"):
            return _method_not_allowed(request.path, {"GET": None, "POST": None})
        try:
            if request.method == "GET":
                return Response(200, challenge.challenge_page(self._any_charge(charge_id)),
                                content_type=html_type)  # fmt: skip
            approve = challenge.parse_outcome(request.body)
            done = self.store.charge_change(
                charge_id,
                lambda charge, now: challenge.complete(
                    charge,
                    approve,
                    now,
                    lambda kind, c: self.notifier.emit(kind, c.to_json(), now),
                ),
            )
        except OperationRefused as exc:
            return Response(exc.status, challenge.closed_page(exc.detail), content_type=html_type)
        location = done.return_url or "/"
        return Response(303, b"", headers=(("Location", location),), content_type=html_type)

    def _any_charge(self, charge_id: str) -> Charge:
        """The charge ``charge_id`` of any account. OperationRefused 404 otherwise."""
        for account in self._accounts.values():
            try:
                return self.store.charge_plan(account, charge_id)[0]
            except OperationRefused:
                continue
        raise OperationRefused("charge_not_found", f"No charge {charge_id[:40]!r}.", status=404)

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


def _method_not_allowed(path: str, methods: Mapping[str, object]) -> Response:
    allowed = ", ".join(sorted(methods))
    return problem_response(
        405,
        "method_not_allowed",
        "Method Not Allowed",
        f"{path} accepts {allowed}.",
        headers=(("Allow", allowed),),
    )


def _idempotency_key(request: Request) -> str | Response:
    """The request's ``Idempotency-Key``, or a 400 response (see ``valid_idempotency_key``)."""
    raw = request.header("idempotency-key")
    if raw is None:
        return _invalid(
            f"Send an Idempotency-Key header with POST {_route(request.path)}.",
            "Idempotency-Key is missing",
        )
    key = valid_idempotency_key(raw)
    if key is None:
        return _invalid(
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII "
            "characters without spaces.",
            "Idempotency-Key is invalid",
        )
    return key


def _prepare(
    request: Request, parse: Callable[[Any], _Body], *, allow_empty: bool
) -> tuple[str, _Body] | Response:
    """The idempotency key and the validated body of a POST, or the 400/415 to answer.

    The body must be ``application/json``; with ``allow_empty`` an empty body (any or no
    ``Content-Type``) counts as ``{}``."""
    key = _idempotency_key(request)
    if isinstance(key, Response):
        return key
    if allow_empty and not request.body:
        data: Any = {}
    else:
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != JSON:
            return problem_response(
                415,
                "unsupported_media_type",
                "Unsupported Media Type",
                "Send the body as application/json.",
            )
        try:
            data = parse_json_body(request.body)
        except InvalidRequest as exc:
            return _invalid(exc.detail)
    try:
        return key, parse(data)
    except InvalidRequest as exc:
        return _invalid(exc.detail)


def _refused(exc: OperationRefused) -> Response:
    """The 404 or 422 for a capture, void or refund the acquirer's rules refuse."""
    title = "Not Found" if exc.status == 404 else "The operation is not allowed"
    return problem_response(exc.status, exc.code, title, exc.detail)


def _list_by_reference(request: Request, find: Callable[[str], Sequence[Any]]) -> Response:
    """``GET /charges`` or ``GET /refunds``: ``{"data": [...]}`` for exactly one
    ``reference`` query parameter, else 400."""
    references = parse_qs(request.query, keep_blank_values=True).get("reference", [])
    if len(references) != 1 or not references[0]:
        return _invalid("Give exactly one non-empty reference query parameter.")
    return json_response(200, {"data": [item.to_json() for item in find(references[0])]})


#: ``/charges/<id>/capture`` and ``/charges/<id>/void``: the id is one path segment.
_CHARGE_OPERATION = re.compile(r"/charges/([^/]+)/(capture|void)")


def _route(path: str) -> str:
    """``path`` with a charge id replaced by ``{id}`` (the routing and stats label)."""
    match = _CHARGE_OPERATION.fullmatch(path)
    return f"/charges/{{id}}/{match.group(2)}" if match else path


def _charge_id(path: str) -> str:
    match = _CHARGE_OPERATION.fullmatch(path)
    assert match is not None
    return match.group(1)


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


def stats_csv(stats: Mapping[str, Any]) -> str:
    """``stats`` flattened to CSV rows ``metric,key,value``.

    A scalar is one row with an empty key (``charges_total,,2``); a table is one row per
    entry (``requests_by_status,201,3``); a nested table joins the outer names with ``.``
    (``requests_by_endpoint.POST /charges,201,3``). Arrival buckets are
    ``arrivals_per_100ms,<bucket start, epoch ms>,<count>``.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["metric", "key", "value"])

    def emit(metric: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                if isinstance(inner, Mapping):
                    emit(f"{metric}.{key}", inner)
                else:
                    writer.writerow([metric, key, inner])
        else:
            writer.writerow([metric, "", value])

    for metric, value in stats.items():
        emit(metric, value)
    return out.getvalue()


_CONDITION_PREFIX = "/_sandbox/conditions/"
_DISPUTE_PREFIX = "/_sandbox/disputes/"

_ROUTES: dict[str, dict[str, Handler | None]] = {
    "/healthz": {"GET": SandboxApp._healthz},
    # None: an acquirer endpoint, dispatched through _ACQUIRER_HANDLERS under conditions.
    "/charges": {"GET": None, "POST": None},
    "/charges/{id}/capture": {"POST": None},
    "/charges/{id}/void": {"POST": None},
    "/refunds": {"GET": None, "POST": None},
    "/_sandbox/stats": {"GET": SandboxApp._stats},
    "/_sandbox/export": {"GET": SandboxApp._stats},
    "/_sandbox/reset": {"POST": SandboxApp._reset},
    "/_sandbox/charges": {"GET": SandboxApp._charge_ledger},
    "/_sandbox/refunds": {"GET": SandboxApp._refund_ledger},
    "/_sandbox/conditions": {"GET": SandboxApp._conditions, "DELETE": SandboxApp._conditions},
    "/_sandbox/notifications": {
        "GET": SandboxApp._notifications,
        "PUT": SandboxApp._notifications,
        "DELETE": SandboxApp._notifications,
    },
    "/_sandbox/disputes": {"POST": SandboxApp._dispute_open},
}

_ACQUIRER_HANDLERS: dict[str, AcquirerHandler] = {
    "POST /charges": SandboxApp._create_charge,
    "GET /charges": SandboxApp._list_charges,
    "POST /charges/{id}/capture": SandboxApp._capture,
    "POST /charges/{id}/void": SandboxApp._void,
    "POST /refunds": SandboxApp._create_refund,
    "GET /refunds": SandboxApp._list_refunds,
}

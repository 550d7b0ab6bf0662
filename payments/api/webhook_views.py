"""The webhooks API: thin views over ``webhooks.services`` and ``webhooks.selectors``.

``POST /webhook_endpoints`` and ``POST /webhook_endpoints/{id}/rotate_secret`` (an
``Idempotency-Key`` is accepted and honoured by the idempotency layer), ``GET
/webhook_endpoints``, ``GET`` and ``DELETE /webhook_endpoints/{id}``, ``GET /events`` (newest
first, ``type``, the list shape and cursor of ``GET /payments``) and ``GET /events/{id}``.
Scoped to the merchant (another merchant's endpoint or event answers 404); every error is an
RFC 9457 problem. They live here, not in ``webhooks``, because the API's edges are the payments
app's (authentication, the strict parser, card data, problems); ``webhooks`` never imports
``payments``.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.responses import replay_response
from payments.api.openapi import idempotency_key_parameter
from payments.api.parsers import request_json
from payments.api.problems import Problem
from payments.api.views import (
    MerchantApi,
    idempotency_key_header,
    json_answer,
    list_answer,
    not_found_problem,
)
from payments.api.webhook_serializers import (
    EndpointListQuerySerializer,
    EventListQuerySerializer,
    RotateSecretInputSerializer,
    WebhookEndpointInputSerializer,
)
from payments.authorization.key_claim import claim_refused
from payments.monitoring.metrics import record_idempotency_replay
from webhooks.selectors import (
    EndpointNotFound,
    EventNotFound,
    endpoint_get,
    endpoint_list,
    event_get,
    event_list,
)
from webhooks.serializers import (
    EndpointDeletedSerializer,
    EndpointListSerializer,
    EndpointSerializer,
    EndpointWithSecretSerializer,
    EventListSerializer,
    EventSerializer,
)
from webhooks.services import (
    Answer,
    EndpointLimitReached,
    Replay,
    endpoint_create,
    endpoint_delete,
    endpoint_rotate_secret,
)

#: The webhooks API's ``Idempotency-Key``: optional, honoured when sent.
OPTIONAL_IDEMPOTENCY_KEY = idempotency_key_parameter(required=False)


def _optional_key(request: Request) -> str | None:
    if request.headers.get("idempotency-key") is None:
        return None
    return idempotency_key_header(request)


def _answer(run) -> HttpResponse:
    """Run an idempotent service call and answer: the new answer, or the replay."""
    try:
        result: Answer | Replay = run()
    except (IdempotencyKeyInUse, IdempotencyKeyReused) as exc:
        claim_refused(exc)
        raise
    if isinstance(result, Replay):
        record_idempotency_replay()
        return replay_response(result.record)
    response = HttpResponse(result.body, status=result.status_code)
    for name, value in result.headers.items():
        response[name] = value
    return response


class WebhookEndpointListCreateApi(MerchantApi):
    """``POST /webhook_endpoints`` (create; the secret is in this answer only) and ``GET``."""

    @extend_schema(
        operation_id="webhook_endpoints_create",
        summary="Create a webhook endpoint (its signing secret is shown in this answer only)",
        request=WebhookEndpointInputSerializer,
        parameters=[OPTIONAL_IDEMPOTENCY_KEY],
        responses={201: EndpointWithSecretSerializer},
    )
    def post(self, request: Request) -> HttpResponse:
        key = _optional_key(request)
        body = WebhookEndpointInputSerializer(data=request_json(request))
        body.is_valid(raise_exception=True)
        try:
            return _answer(
                lambda: endpoint_create(
                    merchant=request.user, idempotency_key=key, **body.validated_data
                )
            )
        except EndpointLimitReached as exc:
            raise Problem(
                f"A merchant may have at most {exc.limit} webhook endpoints; delete one first.",
                code="webhook_endpoint_limit_reached",
                title="Too many webhook endpoints",
            ) from exc

    @extend_schema(
        operation_id="webhook_endpoints_list",
        summary="List webhook endpoints, newest first",
        parameters=[EndpointListQuerySerializer],
        responses={200: EndpointListSerializer},
    )
    def get(self, request: Request) -> HttpResponse:
        def fetch(query: dict) -> tuple[Sequence[object], bool]:
            page = endpoint_list(merchant=request.user, **query)
            return page.endpoints, page.has_more

        return list_answer(
            request,
            EndpointListQuerySerializer,
            fetch,
            EndpointSerializer,
            cursor_not_found=EndpointNotFound,
            cursor_detail="starting_after is not the id of one of your webhook endpoints.",
            cursor_message="No such webhook endpoint.",
        )


class WebhookEndpointDetailApi(MerchantApi):
    """``GET`` (no secret) and ``DELETE /webhook_endpoints/{id}``."""

    @extend_schema(
        operation_id="webhook_endpoints_retrieve",
        summary="Retrieve a webhook endpoint",
        responses={200: EndpointSerializer},
    )
    def get(self, request: Request, endpoint_id: str) -> HttpResponse:
        try:
            endpoint = endpoint_get(merchant=request.user, endpoint_id=endpoint_id)
        except EndpointNotFound as exc:
            raise not_found_problem("webhook endpoint") from exc
        return json_answer(EndpointSerializer(endpoint).data)

    @extend_schema(
        operation_id="webhook_endpoints_delete",
        summary="Delete a webhook endpoint (nothing more is sent to it)",
        responses={200: EndpointDeletedSerializer},
    )
    def delete(self, request: Request, endpoint_id: str) -> HttpResponse:
        try:
            deleted = endpoint_delete(merchant=request.user, endpoint_id=endpoint_id)
        except EndpointNotFound as exc:
            raise not_found_problem("webhook endpoint") from exc
        return json_answer(deleted)


class WebhookEndpointRotateSecretApi(MerchantApi):
    """``POST /webhook_endpoints/{id}/rotate_secret``: a new secret, shown once; the old one
    signs alongside for 24 h."""

    @extend_schema(
        operation_id="webhook_endpoints_rotate_secret",
        summary="Rotate the signing secret (the old one keeps signing alongside for 24 h)",
        request=RotateSecretInputSerializer,
        parameters=[OPTIONAL_IDEMPOTENCY_KEY],
        responses={200: EndpointWithSecretSerializer},
    )
    def post(self, request: Request, endpoint_id: str) -> HttpResponse:
        # The body is read and checked like every body (empty or {}), never ignored.
        body = RotateSecretInputSerializer(data=request_json(request) if request.body else {})
        body.is_valid(raise_exception=True)
        key = _optional_key(request)
        try:
            return _answer(
                lambda: endpoint_rotate_secret(
                    merchant=request.user, endpoint_id=endpoint_id, idempotency_key=key
                )
            )
        except EndpointNotFound as exc:
            raise not_found_problem("webhook endpoint") from exc


class EventListApi(MerchantApi):
    """``GET /events``: newest first, ``type``, ``limit``, ``starting_after``."""

    @extend_schema(
        operation_id="events_list",
        summary="List events, newest first",
        parameters=[EventListQuerySerializer],
        responses={200: EventListSerializer},
    )
    def get(self, request: Request) -> HttpResponse:
        def fetch(query: dict) -> tuple[Sequence[object], bool]:
            page = event_list(merchant=request.user, **query)
            return page.events, page.has_more

        return list_answer(
            request,
            EventListQuerySerializer,
            fetch,
            EventSerializer,
            cursor_not_found=EventNotFound,
            cursor_detail="starting_after is not the id of one of your events.",
            cursor_message="No such event.",
        )


class EventDetailApi(MerchantApi):
    """``GET /events/{id}``: another merchant's event answers 404."""

    @extend_schema(
        operation_id="events_retrieve",
        summary="Retrieve an event",
        responses={200: EventSerializer},
    )
    def get(self, request: Request, event_id: str) -> HttpResponse:
        try:
            event = event_get(merchant=request.user, event_id=event_id)
        except EventNotFound as exc:
            raise not_found_problem("event") from exc
        return json_answer(EventSerializer(event).data)

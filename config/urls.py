"""URL routes: the merchant API, OpenAPI, health and metrics, and the operators' admin."""

from django.contrib import admin
from django.urls import path, register_converter
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from payments.apis import (
    PaymentCaptureApi,
    PaymentDetailApi,
    PaymentListCreateApi,
    PaymentRefundsApi,
    PaymentVoidApi,
    RefundDetailApi,
    healthz,
)
from payments.health import readyz
from payments.metrics_views import metrics_view
from payments.webhook_apis import (
    EventDetailApi,
    EventListApi,
    WebhookEndpointDetailApi,
    WebhookEndpointListCreateApi,
    WebhookEndpointRotateSecretApi,
)


class ObjectIdConverter:
    """An object id in a path (``pay_...``, ``re_...``, ``we_...``, ``evt_...``): one segment
    without a NUL. PostgreSQL text cannot hold NUL, so ``/payments/pay_%00`` would reach the
    query and fail as a 500; it matches no route instead and answers the 404 problem."""

    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(ObjectIdConverter, "id")

urlpatterns = [
    path("payments", PaymentListCreateApi.as_view(), name="payments"),
    path("payments/<id:payment_id>", PaymentDetailApi.as_view(), name="payment-detail"),
    path("payments/<id:payment_id>/capture", PaymentCaptureApi.as_view(), name="payment-capture"),
    path("payments/<id:payment_id>/void", PaymentVoidApi.as_view(), name="payment-void"),
    path("payments/<id:payment_id>/refunds", PaymentRefundsApi.as_view(), name="payment-refunds"),
    path("refunds/<id:refund_id>", RefundDetailApi.as_view(), name="refund-detail"),
    path("webhook_endpoints", WebhookEndpointListCreateApi.as_view(), name="webhook-endpoints"),
    path(
        "webhook_endpoints/<id:endpoint_id>",
        WebhookEndpointDetailApi.as_view(),
        name="webhook-endpoint-detail",
    ),
    path(
        "webhook_endpoints/<id:endpoint_id>/rotate_secret",
        WebhookEndpointRotateSecretApi.as_view(),
        name="webhook-endpoint-rotate-secret",
    ),
    path("events", EventListApi.as_view(), name="events"),
    path("events/<id:event_id>", EventDetailApi.as_view(), name="event-detail"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
    path("admin/", admin.site.urls),
]

handler400 = "payments.problems.bad_request"
handler404 = "payments.problems.not_found"
handler500 = "payments.problems.server_error"

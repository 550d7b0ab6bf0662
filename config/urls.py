"""URL routes: the merchant API, OpenAPI, health and metrics, and the operators' admin."""

from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from payments.api.customer_views import customer_return
from payments.api.notification_views import acquirer_notification
from payments.api.views import (
    PaymentCaptureApi,
    PaymentDetailApi,
    PaymentListCreateApi,
    PaymentRefundsApi,
    PaymentVoidApi,
    RefundDetailApi,
    healthz,
)
from payments.api.webhook_views import (
    EventDetailApi,
    EventListApi,
    WebhookEndpointDetailApi,
    WebhookEndpointListCreateApi,
    WebhookEndpointRotateSecretApi,
)
from payments.monitoring.health import readyz
from payments.monitoring.views import metrics_view

urlpatterns = [
    path("payments", PaymentListCreateApi.as_view(), name="payments"),
    # The shopper's browser after a customer action (3-D Secure; no merchant key): ADR 0049.
    path("payments/return/<path:token>", customer_return, name="payment-return"),
    path("payments/<str:payment_id>", PaymentDetailApi.as_view(), name="payment-detail"),
    path("payments/<str:payment_id>/capture", PaymentCaptureApi.as_view(), name="payment-capture"),
    path("payments/<str:payment_id>/void", PaymentVoidApi.as_view(), name="payment-void"),
    path("payments/<str:payment_id>/refunds", PaymentRefundsApi.as_view(), name="payment-refunds"),
    path("refunds/<str:refund_id>", RefundDetailApi.as_view(), name="refund-detail"),
    path("webhook_endpoints", WebhookEndpointListCreateApi.as_view(), name="webhook-endpoints"),
    path(
        "webhook_endpoints/<str:endpoint_id>",
        WebhookEndpointDetailApi.as_view(),
        name="webhook-endpoint-detail",
    ),
    path(
        "webhook_endpoints/<str:endpoint_id>/rotate_secret",
        WebhookEndpointRotateSecretApi.as_view(),
        name="webhook-endpoint-rotate-secret",
    ),
    path("events", EventListApi.as_view(), name="events"),
    path("events/<str:event_id>", EventDetailApi.as_view(), name="event-detail"),
    path(
        "acquirer_notifications/<str:acquirer>",
        acquirer_notification,
        name="acquirer-notifications",
    ),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
    path("admin/", admin.site.urls),
]

handler400 = "payments.api.problems.bad_request"
handler404 = "payments.api.problems.not_found"
handler500 = "payments.api.problems.server_error"

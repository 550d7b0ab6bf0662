"""``POST /acquirer_notifications/<acquirer name>``: where acquirers push their notifications
(docs/connectors.md, "Notifications"; ADR 0046).

Outside merchant authentication (the acquirer proves itself by its signature, checked by the
acquirer's connector on the raw bytes) and outside CSRF (no cookie is read). The body is read in
full, at most ``MAX_NOTIFICATION_BYTES`` (a request with a ``Content-Length`` the body does not
fill is refused by ``RequestBodyMiddleware`` or here). Answers:

* what the provider expects for a notification stored (Stripe: 200; the sandbox: 204), also for
  one already stored (a redelivery: the provider stops retrying);
* 400 ``notification_refused`` (problem+json) for one that fails verification or cannot be
  read: nothing stored, counted, and the detail says only the reason's code;
* 404 ``not_found`` for a name that is not a configured acquirer taking notifications;
* 413 ``body_too_large`` above the bound (counted as refused).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from gateway_client import MAX_NOTIFICATION_BYTES, NotificationRejected
from payments.api.problems import problem_response
from payments.monitoring.metrics import record_notification_rejected
from payments.notifications.intake import NotificationEndpointUnknown, notification_receive
from payments.notifications.tasks import notification_enqueue

__all__ = ["acquirer_notification"]


@csrf_exempt
@require_POST
def acquirer_notification(request: HttpRequest, acquirer: str) -> HttpResponse:
    """Receive one notification request of ``acquirer`` (see the module docstring)."""
    raw = request.read(MAX_NOTIFICATION_BYTES + 1)
    declared = request.headers.get("content-length") or ""
    if len(raw) > MAX_NOTIFICATION_BYTES:
        record_notification_rejected(acquirer[:24], "too_large")
        return problem_response(
            status_code=413,
            code="body_too_large",
            title="The body is too large",
            detail=f"A notification is at most {MAX_NOTIFICATION_BYTES} bytes.",
        )
    if declared.isdigit() and int(declared) != len(raw):
        return problem_response(
            status_code=400,
            code="body_incomplete",
            title="The body ended early",
            detail="The body ended before the size its Content-Length announced.",
        )
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        intake = notification_receive(acquirer, raw, headers, enqueue=notification_enqueue)
    except NotificationEndpointUnknown:
        return problem_response(
            status_code=404,
            code="not_found",
            title="Not found",
            detail="No acquirer of that name takes notifications here.",
        )
    except NotificationRejected as exc:
        return problem_response(
            status_code=400,
            code="notification_refused",
            title="The notification was refused",
            detail=f"It failed verification or could not be read ({exc.reason}); nothing "
            "was stored.",
        )
    return HttpResponse(intake.body, status=intake.status, content_type=intake.content_type)

"""Bench-only routes: the service's own, plus the same endpoint without its idempotency layer
and behind the django-idempotency-key middleware.

* ``POST /payments``: the service, unchanged (idempotency layer included);
* ``POST /bench/plain/payments``: the same validation, payment writes, acquirer call and answer,
  without the idempotency layer (no key row: no replay, no 409, no 422);
* ``POST /bench/peer/payments``: that plain view behind django-idempotency-key.
"""

from django.urls import path
from idempotency_key.decorators import idempotency_key

from bench.peers.views import PlainPaymentCreateApi
from config.urls import handler400, handler404, handler500  # noqa: F401
from config.urls import urlpatterns as service_urlpatterns

urlpatterns = [
    path("bench/plain/payments", PlainPaymentCreateApi.as_view(), name="bench-plain-payments"),
    path(
        "bench/peer/payments",
        idempotency_key(PlainPaymentCreateApi.as_view()),
        name="bench-peer-payments",
    ),
    *service_urlpatterns,
]

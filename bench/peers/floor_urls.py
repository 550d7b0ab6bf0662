"""Bench-only routes of the stack floor: ``POST /bench/floor/payments`` and ``GET /healthz``
(the benchmark harness waits for it)."""

from django.urls import path

from bench.peers.floor_views import floor_health, floor_payment

urlpatterns = [
    path("bench/floor/payments", floor_payment, name="bench-floor-payments"),
    path("healthz", floor_health, name="bench-floor-health"),
]

"""What API tests send: the body of a valid ``POST /payments`` (shared by tests/conftest.py's
``MerchantClient`` and the test modules; importable, unlike a conftest)."""

from __future__ import annotations

from typing import Any

PAYMENT_BODY: dict[str, Any] = {
    "amount": 1999,
    "currency": "EUR",
    "payment_method": "tok_visa",
    "reference": "order-1",
}

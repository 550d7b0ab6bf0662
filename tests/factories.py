"""factory_boy factories for the project's models."""

from __future__ import annotations

import factory
from django.utils import timezone

from merchants.models import Merchant
from payments.acquirer.client import default_acquirer_name
from payments.models import Payment, PaymentStatus, new_payment_id


class MerchantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Merchant

    name = factory.Sequence(lambda n: f"merchant-{n}")


class PaymentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Payment

    id = factory.LazyFunction(new_payment_id)
    merchant = factory.SubFactory(MerchantFactory)
    amount = 1000
    currency = "EUR"
    payment_method = "tok_visa"
    status = PaymentStatus.SUCCEEDED
    # A succeeded payment was captured (in full unless a test says otherwise), as the API and
    # migration 0006 make it; nothing is captured in any other status.
    amount_captured = factory.LazyAttribute(
        lambda p: p.amount if p.status == PaymentStatus.SUCCEEDED else 0
    )
    acquirer_idempotency_key = factory.LazyAttribute(lambda p: f"authorize-{p.id}")
    acquirer = factory.LazyFunction(default_acquirer_name)
    created_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyAttribute(lambda p: p.created_at)

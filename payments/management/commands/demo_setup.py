"""``python manage.py demo_setup``: a demo merchant, a fresh API key and copy-paste examples.

Used by ``make run``. Each run issues a new key for the merchant ``demo`` (earlier keys stay
valid: keys rotate, they are never shown twice).
"""

import secrets

from django.conf import settings
from django.core.management.base import BaseCommand

from merchants.models import Merchant
from merchants.services import api_key_issue, merchant_create

API = "http://127.0.0.1:8000"


class Command(BaseCommand):
    help = "Create the demo merchant (or a new key for it) and print curl examples."

    def handle(self, *args, **options):
        merchant = Merchant.objects.filter(name="demo").first()
        if merchant is None:
            merchant, issued = merchant_create(name="demo")
        else:
            issued = api_key_issue(merchant=merchant)
        key = issued.raw
        run = secrets.token_hex(3)  # fresh idempotency keys each run: the first curl creates
        body = (
            '{"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", '
            '"reference": "order-1"}'
        )
        declined = '{"amount": 500, "currency": "JPY", "payment_method": "tok_decline"}'
        self.stdout.write(
            f"""
Payment service is starting.
  API            {API}/payments
  OpenAPI        {API}/openapi.json   docs {API}/docs/
  Admin          {API}/admin/   (.venv/bin/python manage.py createsuperuser)
  Sandbox        {settings.ACQUIRER_BASE_URL}   (stats: {settings.ACQUIRER_BASE_URL}/_sandbox/stats)

Demo merchant API key (shown once):
  export API_KEY={key}

Create a payment (run it twice: the second answer is a replay with Idempotent-Replayed: true):
  curl -i -X POST {API}/payments -H "Authorization: Bearer $API_KEY" \\
       -H "Content-Type: application/json" -H "Idempotency-Key: demo-{run}-order-1" \\
       -d '{body}'

A declined payment:
  curl -i -X POST {API}/payments -H "Authorization: Bearer $API_KEY" \\
       -H "Content-Type: application/json" -H "Idempotency-Key: demo-{run}-decline-1" \\
       -d '{declined}'

List payments:
  curl -s {API}/payments -H "Authorization: Bearer $API_KEY"
"""
        )

"""``python manage.py demo_setup``: a demo merchant, a fresh API key and copy-paste examples.

Used by ``make run`` (devtools/run_stack.py, which prints the key again once the stack is
ready) and, with ``--key-only``, by ``make key``. Each run issues a new key for the merchant
``demo`` (earlier keys stay valid for the rotation overlap: keys rotate, they are never shown
twice). The API's address is ``--api``, else ``http://127.0.0.1:$WEB_PORT`` (8000).
"""

import os
import secrets

from django.conf import settings
from django.core.management.base import BaseCommand

from merchants.models import Merchant
from merchants.services import api_key_issue, merchant_create
from webhooks.models import WebhookEndpoint


def left_endpoints(merchant: Merchant, api: str) -> str:
    """The merchant's webhook endpoints still registered (a receiver that stopped without
    deleting its own keeps collecting retries for 3 days), with the call that deletes one; ""
    when there are none."""
    endpoints = WebhookEndpoint.objects.filter(merchant=merchant, deleted_at__isnull=True)
    lines = [
        f"  {e.id}  {e.url}  {e.status}"
        + (f", failing since {e.failing_since:%Y-%m-%d %H:%M} UTC" if e.failing_since else "")
        for e in endpoints.order_by("created_at")
    ]
    if not lines:
        return ""
    return (
        "\nWebhook endpoints of the demo merchant still registered (every event is retried at "
        "each for 3 days;\ndelete those nobody listens at any more):\n"
        + "\n".join(lines)
        + f'\n  curl -X DELETE {api}/webhook_endpoints/<id> -H "Authorization: Bearer $API_KEY"\n'
    )


def api_url() -> str:
    """The API's address as make run serves it (``WEB_PORT``, default 8000)."""
    return f"http://127.0.0.1:{os.environ.get('WEB_PORT', '8000')}"


class Command(BaseCommand):
    help = "Create the demo merchant (or a new key for it) and print curl examples."

    def add_arguments(self, parser):
        parser.add_argument(
            "--key-only", action="store_true", help="print only `export API_KEY=...` (make key)"
        )
        parser.add_argument("--api", default=None, help="the API's address in the examples")

    def handle(self, *args, key_only: bool = False, api: str | None = None, **options):
        API = api or api_url()
        merchant = Merchant.objects.filter(name="demo").first()
        if merchant is None:
            merchant, issued = merchant_create(name="demo")
        else:
            issued = api_key_issue(merchant=merchant)
        key = issued.raw
        if key_only:
            self.stdout.write(f"export API_KEY={key}")
            return
        run = secrets.token_hex(3)  # fresh idempotency keys each run: the first curl creates
        body = (
            '{"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", '
            '"reference": "order-1"}'
        )
        acquirers = settings.ACQUIRERS
        sandbox = acquirers[0].base_url if acquirers else settings.ACQUIRER_BASE_URL
        declined = '{"amount": 500, "currency": "JPY", "payment_method": "tok_decline"}'
        self.stdout.write(
            f"""
Payment service is starting.
  API            {API}/payments
  OpenAPI        {API}/openapi.json   docs {API}/docs/
  Admin          {API}/admin/   (.venv/bin/python manage.py createsuperuser)
  Sandbox        {sandbox}   (stats: {sandbox}/_sandbox/stats)

Demo merchant API key (printed again when the stack is ready; make key prints a new one):
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
{left_endpoints(merchant, API)}"""
        )

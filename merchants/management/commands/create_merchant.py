"""``python manage.py create_merchant NAME``: create a merchant and print its new API key.

The key is printed once, as the last line of the output; only its hash is stored. With
``--if-exists=new-key`` an existing merchant gets an additional key instead of an error (used by
``make run`` for the demo merchant).
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from merchants.models import Merchant
from merchants.services import (
    MerchantNameRefused,
    api_key_issue,
    merchant_create,
    merchant_name_check,
)


class Command(BaseCommand):
    help = "Create a merchant and print its API key (shown once, as the last line)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--if-exists",
            choices=["error", "new-key"],
            default="error",
            help="What to do when a merchant with this name exists (default: error).",
        )

    def handle(self, *args, name: str, if_exists: str, **options):
        name = name.strip()
        if not name:
            raise CommandError("NAME must not be empty.")
        try:
            merchant_name_check(name)  # before the name reaches a query or a message
        except MerchantNameRefused as exc:
            raise CommandError(str(exc)) from None
        existing = Merchant.objects.filter(name=name).first()
        if existing is not None:
            if if_exists != "new-key":
                raise CommandError(f"A merchant named {name!r} exists; use --if-exists=new-key.")
            issued = api_key_issue(merchant=existing)
            self.stdout.write(f"Merchant {name!r} exists (id {existing.pk}); issued a new API key.")
        else:
            try:
                merchant, issued = merchant_create(name=name)
            except IntegrityError as exc:
                raise CommandError(f"A merchant named {name!r} exists.") from exc
            self.stdout.write(f"Created merchant {name!r} (id {merchant.pk}).")
        self.stdout.write("API key (shown once, store it now):")
        self.stdout.write(issued.raw)

"""``python manage.py create_merchant NAME [NAME ...]``: create merchants and print their new
API keys.

Each key is printed once, on the line after ``API key (shown once, store it now):``; with one
NAME it is the last line of the output. Only a key's hash is stored. With ``--if-exists=new-key``
an existing merchant gets an additional key instead of an error (used by ``make run`` for the
demo merchant). Several names are all checked before any is created, then created in the order
given: a refused or repeated name creates nothing; a taken one stops the command after the
merchants before it, whose keys were printed.
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
    help = (
        "Create merchants and print each one's API key (shown once, on the line after "
        "'API key'; with one NAME, the last line)."
    )

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.add_argument(
            "--if-exists",
            choices=["error", "new-key"],
            default="error",
            help="What to do when a merchant with a NAME exists (default: error).",
        )

    def handle(self, *args, names: list[str], if_exists: str, **options):
        names = [name.strip() for name in names]
        for name in names:
            if not name:
                raise CommandError("NAME must not be empty.")
            try:
                merchant_name_check(name)  # before the name reaches a query or a message
            except MerchantNameRefused as exc:
                raise CommandError(str(exc)) from None
        if len(set(names)) != len(names):
            raise CommandError("A NAME is given twice.")
        for name in names:
            self._create(name, if_exists)

    def _create(self, name: str, if_exists: str) -> None:
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

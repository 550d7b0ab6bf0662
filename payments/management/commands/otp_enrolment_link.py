"""``python manage.py otp_enrolment_link <username> [--base-url URL]``.

Prints a one-time link that lets one staff user enrol their first TOTP device
(console/two_factor.py, ADR 0019): a password alone never does. Run by whoever administers the
deployment (it needs the deployment's shell and settings); hand the link to the user out of
band. It lasts ``ADMIN_OTP_ENROLMENT_SECONDS`` and dies once a device is confirmed or the
password changes. A user who already has a confirmed device is refused: a superuser deletes it
under "TOTP devices" first (a lost phone). The link is printed, never logged.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from console.two_factor import ENROLMENT_PARAMETER, enrolment_token


class Command(BaseCommand):
    help = "Print a one-time link enrolling a staff user's first TOTP device."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--base-url", default="", help="The admin's origin, e.g. https://pay.example.com"
        )

    def handle(self, *args, username: str, base_url: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not (user.is_active and user.is_staff):
            raise CommandError(f"No active staff user named {username!r}.")
        if TOTPDevice.objects.filter(user=user, confirmed=True).exists():
            raise CommandError(
                f"{username} already has a confirmed device; delete it under 'TOTP devices' "
                "first (a lost phone), then make a link."
            )
        now = timezone.now()
        token = enrolment_token(user, now=now)
        path = reverse("admin:two_factor")
        hours = settings.ADMIN_OTP_ENROLMENT_SECONDS / 3600
        self.stdout.write(f"{base_url.rstrip('/')}{path}?{ENROLMENT_PARAMETER}={token}")
        self.stdout.write(
            f"For {username} only, once, within {hours:g} h: hand it over out of band; the user "
            "opens it while logged in with their password."
        )

"""The admin's login and sessions (console/two_factor.py, ADR 0019): throttling by django-axes,
the TOTP second factor required when ADMIN_OTP_REQUIRED is on (production) and optional
otherwise, and sessions that end after a working day."""

from __future__ import annotations

import ast
import io
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from console.two_factor import enrolment_device, enrolment_token

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/admin/login/"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff() -> User:
    return User.objects.create_user("ops", password=PASSWORD, is_staff=True, is_superuser=True)


def login(client, password: str = PASSWORD, code: str = "", next_url: str = "/admin/"):
    return client.post(
        f"{LOGIN}?next={next_url}",
        {"username": "ops", "password": password, "otp_token": code, "next": next_url},
    )


def code_for(device: TOTPDevice, steps_ahead: int = 0) -> str:
    """The device's code for the current time step (or one ahead: a code is accepted once,
    and the device's tolerance of one step admits the next)."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_failed_logins_lock_the_account_out_with_a_clear_message(client, staff):
    """Three wrong passwords for one username from one address: the third is answered with
    the lockout page (429), and so is the right password afterwards, with no session."""
    for _ in range(2):
        assert login(client, password="wrong").status_code == 200  # the form again, with errors
    assert login(client, password="wrong").status_code == 429
    locked = login(client)
    assert locked.status_code == 429
    assert "Too many failed login attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session


@override_settings(AXES_FAILURE_LIMIT=3)
def test_a_success_resets_the_failure_count(client, staff):
    """Two failures, a success, two failures: not locked (the count restarts on success)."""
    for _ in range(2):
        login(client, password="wrong")
    assert login(client).status_code == 302
    client.logout()
    for _ in range(2):
        login(client, password="wrong")
    assert login(client).status_code == 302


def enrolment_link(username: str = "ops") -> str:
    """The path ``manage.py otp_enrolment_link`` prints (its first line)."""
    out = io.StringIO()
    call_command("otp_enrolment_link", username, stdout=out)
    return out.getvalue().splitlines()[0]


@override_settings(ADMIN_OTP_REQUIRED=True, OTP_TOTP_THROTTLE_FACTOR=0)  # no wait after "000000"
def test_a_second_factor_is_required_when_the_setting_is_on(client, staff):
    """Production-like: a password alone leads to the two-factor page, never to the admin,
    and enrols nothing there (403: ask for a link); the one-time link shows the QR code, a code
    from that device opens the admin, the link is dead afterwards, and the next login needs a
    code."""
    assert login(client).status_code == 302
    index = client.get("/admin/", follow=True)
    assert index.redirect_chain[-1][0].startswith("/admin/two-factor/")
    assert index.status_code == 403
    assert "otp_enrolment_link ops" in index.content.decode()
    assert "Scan this code" not in index.content.decode()
    assert not TOTPDevice.objects.exists()
    assert client.post("/admin/two-factor/", {"otp_token": "000000"}).status_code == 403
    assert client.get("/admin/payments/payment/").status_code == 302

    link = enrolment_link()
    token = link.split("enrol=")[1]
    page = client.get(link)
    assert page.status_code == 200 and "Scan this code" in page.content.decode()
    device = TOTPDevice.objects.get(user=staff, confirmed=False)
    wrong = client.post("/admin/two-factor/", {"otp_token": "000000", "enrol": token})
    assert wrong.status_code == 200
    confirmed = client.post(
        "/admin/two-factor/", {"otp_token": code_for(device), "next": "/admin/", "enrol": token}
    )
    assert confirmed["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
    client.logout()
    refused = login(client)
    assert refused.status_code == 200 and "6-digit code" in refused.content.decode()
    device.refresh_from_db()
    assert login(client, code=code_for(device, steps_ahead=1)).status_code == 302
    assert client.get("/admin/").status_code == 200
    TOTPDevice.objects.all().delete()  # a lost phone: the used link does not come back
    assert client.get(link).status_code == 403


@override_settings(ADMIN_OTP_REQUIRED=True)
def test_a_link_opened_before_login_comes_back_after_it(client, staff):
    """The link opened logged out goes to the login page and back to itself."""
    link = enrolment_link()
    to_login = client.get(link)
    assert to_login.status_code == 302 and to_login["Location"].startswith(LOGIN)
    back = client.post(to_login["Location"], {"username": "ops", "password": PASSWORD})
    assert back["Location"] == link
    assert "Scan this code" in client.get(back["Location"]).content.decode()


def test_a_link_is_for_one_user_for_a_day_and_dies_with_a_new_password(staff):
    """At an injected clock: valid until ADMIN_OTP_ENROLMENT_SECONDS, then not; never for
    another user; not when altered; not after the password changed, nor after a newer link."""
    now = timezone.now().replace(microsecond=0)
    day = settings.ADMIN_OTP_ENROLMENT_SECONDS

    def device(user, token, at=now):
        return enrolment_device(user, token, now=at, max_age=day)

    token = enrolment_token(staff, now=now)
    made = TOTPDevice.objects.get(user=staff, confirmed=False)
    assert device(staff, token, now + timedelta(seconds=day)) == made
    assert device(staff, token, now + timedelta(seconds=day + 1)) is None
    assert device(staff, token, now - timedelta(seconds=1)) is None
    other = User.objects.create_user("other", password=PASSWORD, is_staff=True)
    assert device(other, token) is None
    assert device(staff, token[:-2] + "xx") is None
    assert device(staff, "") is None
    newer = enrolment_token(staff, now=now)
    assert device(staff, token) is None and device(staff, newer) is not None
    staff.set_password("a new one")
    staff.save()
    assert device(staff, newer) is None


def test_the_link_command_refuses_a_non_staff_user_and_an_enrolled_one(staff):
    User.objects.create_user("merchant-person", password=PASSWORD)
    with pytest.raises(CommandError, match="No active staff user"):
        enrolment_link("merchant-person")
    TOTPDevice.objects.create(user=staff, name="admin", confirmed=True)
    with pytest.raises(CommandError, match="already has a confirmed device"):
        enrolment_link()


def test_the_second_factor_is_optional_in_development(client, staff):
    """ADMIN_OTP_REQUIRED off: the password opens the admin; enrolment is offered, through a
    link as in production."""
    assert settings.ADMIN_OTP_REQUIRED is False
    assert login(client).status_code == 302
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/two-factor/").status_code == 403
    assert client.get(enrolment_link()).status_code == 200


def test_production_settings_require_the_second_factor():
    """config/settings/production.py sets ADMIN_OTP_REQUIRED = True (read, not imported: it
    needs the production environment)."""
    tree = ast.parse((ROOT / "config/settings/production.py").read_text())
    values = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert isinstance(values["ADMIN_OTP_REQUIRED"], ast.Constant)
    assert values["ADMIN_OTP_REQUIRED"].value is True


def test_admin_sessions_end_after_a_working_day(client, staff):
    """The session cookie of a login lasts 8 hours and no session survives the browser."""
    assert settings.SESSION_EXPIRE_AT_BROWSER_CLOSE is True
    login(client)
    assert client.session.get_expiry_age() == 8 * 3600 == settings.SESSION_COOKIE_AGE


def test_the_lockout_template_names_the_way_out():
    """The lockout page tells the operator how long and how to get unlocked."""
    text = (ROOT / "config/templates/admin/login_locked_out.html").read_text()
    assert "{{ cooloff_time }}" in text and re.search(r"axes_reset_username", text)

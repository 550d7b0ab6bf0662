"""The admin's login: throttled by django-axes, with a TOTP second factor from django-otp.

* Login (:class:`AdminLoginForm`): username, password and, for a user with a confirmed TOTP
  device, its current code. django-axes counts failed passwords per (username, address) and
  locks that pair out (``ADMIN_LOGIN_FAILURE_LIMIT``, ``ADMIN_LOGIN_LOCKOUT_MINUTES``; the page
  ``admin/login_locked_out.html``); a wrong code is throttled by the device itself (django-otp
  doubles the wait after each failure).
* ``ADMIN_OTP_REQUIRED`` (on in ``config.settings.production``): a staff user whose session is
  not verified by a code has no admin access; the login page sends them to
  :func:`two_factor_view` (``/admin/two-factor/``), which asks the code of the device they
  have. Off (development), the page is offered and a user who enrolled must give codes from
  then on.
* **Enrolling a first device needs more than the password**: a one-time enrolment link
  (:func:`enrolment_token`, made by ``manage.py otp_enrolment_link <user>``, run by whoever
  administers the deployment, and handed to the user out of band). The link is signed, names
  its user and the unconfirmed device made with it, lasts ``ADMIN_OTP_ENROLMENT_SECONDS`` and
  dies when used (its device confirmed), when its device is deleted or replaced by a newer
  link's, or when the user's password changes; without one the page says how to get one and enrols
  nothing. A stolen password alone therefore never enrols the thief's phone (ADR 0019).

A user's device is reset by a superuser (delete it under "TOTP devices", then make a new link);
its secret is never shown again after enrolment (``OTP_ADMIN_HIDE_SENSITIVE_DATA``).
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.core.signing import BadSignature, Signer
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

__all__ = [
    "AdminLoginForm",
    "enrolment_device",
    "enrolment_token",
    "needs_second_factor",
    "two_factor_view",
]

CODE_ERROR = "Enter the current 6-digit code of your authenticator app."
#: The salt of enrolment links (django.core.signing, keyed by SECRET_KEY).
ENROLMENT_SALT = "console.two_factor.enrolment"
#: The query parameter (and hidden field) carrying an enrolment link's token.
ENROLMENT_PARAMETER = "enrol"


def _enrolment_state(user) -> str:
    """What a link is bound to besides its device: the user's password hash (a new password
    kills every earlier link)."""
    return salted_hmac(ENROLMENT_SALT, user.password).hexdigest()[:24]


def enrolment_token(user, *, now: datetime) -> str:
    """Make ``user`` a new unconfirmed TOTP device (their earlier unconfirmed ones are
    deleted, and with them their links) and return a one-time token for it, made at ``now``:
    ``<user pk>:<device pk>:<Unix seconds>:<state>:<signature>``
    (see :func:`enrolment_device`)."""
    TOTPDevice.objects.filter(user=user, confirmed=False).delete()
    device = TOTPDevice.objects.create(user=user, name="admin", confirmed=False)
    return Signer(salt=ENROLMENT_SALT).sign(
        f"{user.pk}:{device.pk}:{int(now.timestamp())}:{_enrolment_state(user)}"
    )


def enrolment_device(user, token: str, *, now: datetime, max_age: float) -> TOTPDevice | None:
    """The unconfirmed device ``token`` (:func:`enrolment_token`) enrols for ``user``, when it
    was made at most ``max_age`` seconds before ``now``, the password did not change since, and
    the device is still there and unconfirmed; else None. Confirming the device, deleting it
    or making a new link therefore ends the token: it works once. An altered or malformed
    token is None."""
    try:
        pk, device_pk, issued, state = Signer(salt=ENROLMENT_SALT).unsign(token).split(":")
    except (BadSignature, ValueError):
        return None
    if pk != str(user.pk) or not issued.isdigit() or not device_pk.isdigit():
        return None
    if not 0 <= now.timestamp() - int(issued) <= max_age:
        return None
    if not constant_time_compare(state, _enrolment_state(user)):
        return None
    return TOTPDevice.objects.filter(pk=int(device_pk), user=user, confirmed=False).first()


def _code_field() -> forms.CharField:
    return forms.CharField(
        required=False,
        label="Authentication code",
        max_length=8,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric"}),
    )


def _confirmed_device(user) -> TOTPDevice | None:
    return TOTPDevice.objects.filter(user=user, confirmed=True).order_by("pk").first()


def _verified(device: TOTPDevice, token: str | None) -> bool:
    """Whether ``token`` is the device's current code (a wrong one counts against its
    throttle, django-otp's exponential back-off)."""
    return bool(token) and device.verify_token(token.strip())


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's login form: the password (django-axes counts failures), then the current
    TOTP code when the user has a confirmed device; a correct one marks the session verified
    (django-otp's ``user_logged_in`` handler reads ``user.otp_device``)."""

    otp_token = _code_field()

    def clean(self) -> dict:
        cleaned = super().clean()
        user = self.get_user()
        device = _confirmed_device(user) if user is not None else None
        if device is not None:
            if not _verified(device, cleaned.get("otp_token")):
                raise forms.ValidationError(CODE_ERROR, code="invalid_token")
            user.otp_device = device
        return cleaned


def needs_second_factor(request: HttpRequest) -> bool:
    """True for an active staff user, logged in with a password only, while
    ``ADMIN_OTP_REQUIRED`` is on: the admin refuses them until a code verifies the session."""
    user = request.user
    return (
        settings.ADMIN_OTP_REQUIRED
        and user.is_authenticated
        and user.is_active
        and user.is_staff
        and not user.is_verified()
    )


class _CodeForm(forms.Form):
    otp_token = _code_field()


def _qr_svg(url: str) -> str:
    import qrcode
    import qrcode.image.svg

    return qrcode.make(url, image_factory=qrcode.image.svg.SvgPathImage).to_string(
        encoding="unicode"
    )


@never_cache
def two_factor_view(request: HttpRequest, site, clock=timezone.now) -> HttpResponse:
    """``/admin/two-factor/``: with a confirmed device, verify this session with its code;
    without one, enrol a TOTP device (GET: its QR code; POST: a code confirms it) only with a
    valid enrolment link (``?enrol=<token>``, kept in a hidden field), else a page saying how
    to get one (403). Anonymous or non-staff users are sent to the login page, which comes
    back here (the link included). ``clock``: the time links are checked at."""
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        login = reverse("admin:login", current_app=site.name)
        return HttpResponseRedirect(f"{login}?{urlencode({'next': request.get_full_path()})}")
    device = _confirmed_device(user)
    enrolling = device is None
    token = request.POST.get(ENROLMENT_PARAMETER) or request.GET.get(ENROLMENT_PARAMETER, "")
    if enrolling:
        device = enrolment_device(
            user, token, now=clock(), max_age=settings.ADMIN_OTP_ENROLMENT_SECONDS
        )
    if device is None:
        context = {
            **site.each_context(request),
            "title": "Two-factor authentication",
            "needs_link": True,
            "username": user.get_username(),
            "link_given": bool(token),
        }
        return TemplateResponse(request, "admin/two_factor.html", context, status=403)
    form = _CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if _verified(device, form.cleaned_data["otp_token"]):
            if enrolling:
                device.confirmed = True
                device.save(update_fields=["confirmed"])
            otp_login(request, device)
            target = request.POST.get(REDIRECT_FIELD_NAME, "")
            if not url_has_allowed_host_and_scheme(target, {request.get_host()}):
                target = reverse("admin:index", current_app=site.name)
            return HttpResponseRedirect(target)
        form.add_error("otp_token", CODE_ERROR)
    context = {
        **site.each_context(request),
        "title": "Two-factor authentication",
        "form": form,
        "enrolling": enrolling,
        "enrolment_token": token if enrolling else "",
        "required": settings.ADMIN_OTP_REQUIRED,
        "next": request.GET.get(REDIRECT_FIELD_NAME, request.POST.get(REDIRECT_FIELD_NAME, "")),
    }
    if enrolling:
        # The secret is shown to its own user, on this page only, until the device is confirmed.
        context["qr_svg"] = mark_safe(_qr_svg(device.config_url))  # noqa: S308 - qrcode's own SVG
    return TemplateResponse(request, "admin/two_factor.html", context)

"""The admin's login: throttled by django-axes, with a TOTP second factor from django-otp.

* Login (:class:`AdminLoginForm`): username, password and, for a user with a confirmed TOTP
  device, its current code. django-axes counts failed passwords per (username, address) and
  locks that pair out (``ADMIN_LOGIN_FAILURE_LIMIT``, ``ADMIN_LOGIN_LOCKOUT_MINUTES``; the page
  ``admin/login_locked_out.html``); a wrong code is throttled by the device itself (django-otp
  doubles the wait after each failure).
* ``ADMIN_OTP_REQUIRED`` (on in ``config.settings.production``): a staff user whose session is
  not verified by a code has no admin access; the login page sends them to
  :func:`two_factor_view` (``/admin/two-factor/``), which enrols their first device (QR code,
  then a code to confirm it) or asks the code of the one they have. Off (development), the page
  is offered and a user who enrolled must give codes from then on.

A user's device is reset by a superuser (delete it under "TOTP devices"); its secret is never
shown again after enrolment (``OTP_ADMIN_HIDE_SENSITIVE_DATA``).
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

__all__ = ["AdminLoginForm", "needs_second_factor", "two_factor_view"]

CODE_ERROR = "Enter the current 6-digit code of your authenticator app."


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
def two_factor_view(request: HttpRequest, site) -> HttpResponse:
    """``/admin/two-factor/``: enrol a TOTP device (GET: its QR code; POST: a code confirms it)
    or, with one confirmed, verify this session with its code. Anonymous or non-staff users are
    sent to the login page."""
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return HttpResponseRedirect(reverse("admin:login", current_app=site.name))
    device = _confirmed_device(user)
    enrolling = device is None
    if enrolling:
        device = TOTPDevice.objects.filter(user=user, confirmed=False).order_by("pk").first()
        if device is None:
            device = TOTPDevice.objects.create(user=user, name="admin", confirmed=False)
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
        "required": settings.ADMIN_OTP_REQUIRED,
        "next": request.GET.get(REDIRECT_FIELD_NAME, request.POST.get(REDIRECT_FIELD_NAME, "")),
    }
    if enrolling:
        # The secret is shown to its own user, on this page only, until the device is confirmed.
        context["qr_svg"] = mark_safe(_qr_svg(device.config_url))  # noqa: S308 - qrcode's own SVG
    return TemplateResponse(request, "admin/two_factor.html", context)

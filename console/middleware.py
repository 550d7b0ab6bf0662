"""The operations console's cookie middleware, applied on the console's paths only (ADR 0029).

The console (the Django admin under :data:`CONSOLE_PATH_PREFIX`: its login, the two-factor
pages, every model page) is the one part of the service that a browser uses with cookies: a
session, the user it names, django-otp's verified device, and messages. The merchant API
authenticates every request by its API key (``merchants/authentication.py``), and the other
routes (``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``, ``/docs/``) read no
cookie either. Each class below is the middleware it subclasses, run exactly as before when
``request.path_info`` starts with :data:`CONSOLE_PATH_PREFIX`, and passed over on every other
path: no session is loaded or saved there, no ``request.user`` is set from a cookie, no
message storage is made, and no ``Set-Cookie`` can come from them. An operator's session
cookie sent to the API is ignored; the request still needs an API key (401 without one).

What stays on every path (``config/settings/base.py`` ``MIDDLEWARE``): the request context,
prometheus, ``SecurityMiddleware``, WhiteNoise, ``CommonMiddleware``,
``CsrfViewMiddleware`` (inert on the API, whose DRF views are CSRF-exempt, and kept whole
so ``check --deploy`` still finds it and checks ``CSRF_COOKIE_SECURE``),
``XFrameOptionsMiddleware``, ``AxesMiddleware`` (it acts only on the lockout flag the admin
login sets; django-axes' check looks for its exact name) and the problem middleware.

The classes subclass the originals so Django's admin checks (``admin.E408``-``E410``, which
look for subclasses) still find them. None of the originals has a ``process_view``,
``process_exception`` or ``process_template_response`` hook, which the request handler would
call outside ``__call__`` (``tests/integration/test_console_middleware.py`` keeps that true).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, QueryDict
from django.urls import reverse
from django_otp.middleware import OTPMiddleware

from card_data import redact_card_numbers

__all__ = [
    "CONSOLE_PATH_PREFIX",
    "ConsoleAuthenticationMiddleware",
    "ConsoleLoginRedactionMiddleware",
    "ConsoleMessageMiddleware",
    "ConsoleOTPMiddleware",
    "ConsoleOnlyMixin",
    "ConsoleSessionMiddleware",
    "is_console_path",
]

#: Where the console lives (``config/urls.py`` mounts ``admin.site.urls`` here): every URL
#: that resolves to an admin view starts with it (the route test of
#: ``tests/integration/test_console_middleware.py``).
CONSOLE_PATH_PREFIX = "/admin/"


def is_console_path(request: HttpRequest) -> bool:
    """True when ``request`` is for the console: its ``path_info`` (the path the URL resolver
    matches, without the script prefix) starts with :data:`CONSOLE_PATH_PREFIX`."""
    return request.path_info.startswith(CONSOLE_PATH_PREFIX)


class ConsoleOnlyMixin:
    """Put first in the bases of a middleware class: the middleware runs on console paths
    (:func:`is_console_path`) and hands any other request straight to the next layer."""

    get_response: Any

    def __call__(self, request: HttpRequest) -> Any:
        if is_console_path(request):
            return super().__call__(request)  # type: ignore[misc]
        return self.get_response(request)


class ConsoleSessionMiddleware(ConsoleOnlyMixin, SessionMiddleware):
    """Django's ``SessionMiddleware`` (the admin's session cookie), on console paths only."""


class ConsoleAuthenticationMiddleware(ConsoleOnlyMixin, AuthenticationMiddleware):
    """Django's ``AuthenticationMiddleware`` (``request.user`` from the session), on console
    paths only. API views get ``request.user`` (the merchant) from DRF's authentication."""


class ConsoleOTPMiddleware(ConsoleOnlyMixin, OTPMiddleware):
    """django-otp's ``OTPMiddleware`` (``request.user.otp_device``), on console paths only."""


class ConsoleMessageMiddleware(ConsoleOnlyMixin, MessageMiddleware):
    """Django's ``MessageMiddleware`` (the admin's flash messages), on console paths only."""


#: The request headers a client sets that django-axes copies into its tables.
RECORDED_HEADERS = ("HTTP_USER_AGENT", "HTTP_ACCEPT")
#: The form fields never rewritten: a password is not a card number, and axes masks it.
UNTOUCHED_FIELDS = frozenset({"password"})


class ConsoleLoginRedactionMiddleware:
    """On console paths, replace card numbers (``card_data.redact_card_numbers`` without the
    Luhn check, as the log redaction does) in the headers django-axes copies into its tables
    (:data:`RECORDED_HEADERS`); on the login page, also in the query string and the form's
    fields but the password. Axes records every login attempt (``AccessAttempt``,
    ``AccessFailureLog``, ``AccessLog``: user name, user agent, ``Accept``, query and form
    data), so a card number typed into the login form or sent in a header would otherwise be
    stored, shown in the admin and logged. Other console pages keep what was sent: their forms
    refuse card data with an error (``console/forms.py``), which a rewrite would hide."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        if is_console_path(request):
            for name in RECORDED_HEADERS:
                value = request.META.get(name)
                if isinstance(value, str):
                    request.META[name] = redact_card_numbers(value, require_luhn=False)
            if request.path_info == reverse("admin:login"):
                request.GET = _redacted(request.GET)
                if request.method == "POST":
                    request.POST = _redacted(request.POST)
        return self.get_response(request)


def _redacted(query: QueryDict) -> QueryDict:
    """A copy of ``query`` with card numbers replaced in its names and values, the fields of
    :data:`UNTOUCHED_FIELDS` as they were."""
    copy = QueryDict(mutable=True)
    for name, values in query.lists():
        if name in UNTOUCHED_FIELDS:
            copy.setlist(name, values)
        else:
            copy.setlist(
                redact_card_numbers(name, require_luhn=False),
                [redact_card_numbers(value, require_luhn=False) for value in values],
            )
    copy._mutable = False
    return copy

"""The console's cookie middleware runs on /admin/ paths only (console/middleware.py,
ADR 0029): the API sets and reads no cookie, the admin keeps its session, CSRF protection,
second factor and lockout, and the security headers stay on every path."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.views import APIView

from console.middleware import (
    CONSOLE_PATH_PREFIX,
    ConsoleAuthenticationMiddleware,
    ConsoleMessageMiddleware,
    ConsoleOTPMiddleware,
    ConsoleSessionMiddleware,
)
from payments.api.customer_views import customer_return
from payments.api.notification_views import acquirer_notification
from payments.api.views import healthz
from payments.monitoring.health import readyz
from payments.monitoring.views import metrics_view
from tests.support.api import PAYMENT_BODY

PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff(db) -> User:
    return User.objects.create_user("ops", password=PASSWORD, is_staff=True, is_superuser=True)


def operator_cookies(staff: User) -> Client:
    """A browser of an operator logged in to the admin: its session and CSRF cookies."""
    browser = Client()
    browser.force_login(staff)
    assert browser.get("/admin/").status_code == 200  # its logout form sets the CSRF cookie
    assert {"sessionid", "csrftoken"} <= set(browser.cookies)
    return browser


@pytest.mark.django_db(transaction=True)
def test_an_api_answer_sets_no_cookie_even_to_an_operators_browser(merchant_a, sandbox, staff):
    """A payment, a list and a 404 answer without ``Set-Cookie``, and so does a request that
    carries an operator's session and CSRF cookies; the security headers are all there."""
    merchant_a.client.cookies = operator_cookies(staff).cookies
    answers = [
        merchant_a.create_payment(PAYMENT_BODY),
        merchant_a.client.get("/payments"),
        merchant_a.client.get("/payments/pay_0000"),
        merchant_a.client.get("/healthz"),
    ]
    assert [answer.status_code for answer in answers] == [201, 200, 404, 200]
    for answer in answers:
        assert not answer.cookies, answer.cookies
        assert "Set-Cookie" not in answer.headers
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["Referrer-Policy"] == "same-origin"
        assert answer.headers["Request-Id"]
        assert "Cookie" not in answer.headers.get("Vary", "")
        # The console's middleware did not run: no session loaded, no message storage made.
        assert not hasattr(answer.wsgi_request, "session")
        assert not hasattr(answer.wsgi_request, "_messages")


def test_an_operators_session_is_no_credential_for_the_api(staff):
    """Only an API key authenticates the API: the admin's session cookie alone is a 401."""
    browser = operator_cookies(staff)
    assert browser.get("/admin/").status_code == 200  # the session works where it belongs
    for answer in (browser.get("/payments"), browser.get("/webhook_endpoints")):
        assert answer.status_code == 401
        assert answer.json()["code"] == "authentication_required"
        assert not answer.cookies


def test_the_admin_keeps_csrf_protection_and_its_session(staff):
    """The login form without its CSRF token is refused (403); with it the operator logs in,
    gets a session cookie and sees the admin's pages, framed by nobody."""
    browser = Client(enforce_csrf_checks=True)
    credentials = {"username": "ops", "password": PASSWORD, "otp_token": ""}
    assert browser.post("/admin/login/", credentials).status_code == 403
    page = browser.get("/admin/login/")
    assert page.status_code == 200
    assert page.headers["X-Frame-Options"] == "DENY"
    token = browser.cookies["csrftoken"].value
    answer = browser.post(
        "/admin/login/?next=/admin/", {**credentials, "csrfmiddlewaretoken": token}
    )
    assert answer.status_code == 302
    assert "sessionid" in answer.cookies
    index = browser.get("/admin/")
    assert index.status_code == 200
    assert index.wsgi_request.session.session_key
    assert index.wsgi_request.user.is_verified() is False  # django-otp ran: no device yet
    # A state-changing admin form without the token is refused too (logout is a POST form).
    assert browser.post("/admin/logout/").status_code == 403


def _patterns(resolvers: list, prefix: str = "/") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for entry in resolvers:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found.extend(_patterns(entry.url_patterns, route))
        elif isinstance(entry, URLPattern):
            found.append((route, entry.callback))
    return found


def test_every_route_that_may_use_a_session_is_under_the_console_prefix():
    """The admin (login and two-factor pages included) is mounted under the prefix; every
    route outside it is a DRF view (API-key authenticated, CSRF-exempt) or one of the plain
    views that read no cookie. A new page outside the console must be added here on purpose."""
    for name in ("admin:index", "admin:login", "admin:logout", "admin:two_factor"):
        assert reverse(name).startswith(CONSOLE_PATH_PREFIX), name
    # The acquirers' notifications: authenticated by the provider's signature on the raw body.
    # The shopper's return from a customer action: named by the unguessable token in its path.
    no_cookie_views = {healthz, readyz, metrics_view, acquirer_notification, customer_return}
    outside = [
        (route, view)
        for route, view in _patterns(get_resolver().url_patterns)
        if not route.startswith(CONSOLE_PATH_PREFIX)
    ]
    assert len(outside) > 10
    for route, view in outside:
        view_class = getattr(view, "cls", None)
        is_drf = isinstance(view_class, type) and issubclass(view_class, APIView)
        assert is_drf or view in no_cookie_views or route == "/docs/", route


@pytest.mark.parametrize(
    "middleware",
    [
        ConsoleSessionMiddleware,
        ConsoleAuthenticationMiddleware,
        ConsoleOTPMiddleware,
        ConsoleMessageMiddleware,
    ],
)
def test_the_console_middleware_does_its_work_in_call_only(middleware):
    """Django's handler calls ``process_view``, ``process_exception`` and
    ``process_template_response`` on its own, outside ``__call__``: none of the wrapped
    classes may have one, or it would run on every path."""
    for hook in ("process_view", "process_exception", "process_template_response"):
        assert not hasattr(middleware, hook), (middleware, hook)

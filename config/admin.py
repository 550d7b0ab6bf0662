"""The project's admin site: Django's, plus the pages that belong to no model.

:class:`PaymentServiceAdminSite` is ``admin.site`` (installed by
:class:`config.apps.PaymentServiceAdminConfig` through ``default_site``): every app registers
its models on it as usual (``@admin.register``), and the site adds the acquirer resilience page
(:class:`payments.admin.resilience.ResilienceAdmin`) to its URLs and to the payments app of its
app list (the index, the app index and the navigation sidebar). Its login is throttled and takes
a TOTP code, required for staff when ``ADMIN_OTP_REQUIRED`` is on (:mod:`console.two_factor`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.http import HttpResponseRedirect
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils.http import urlencode

from console.two_factor import AdminLoginForm, needs_second_factor, two_factor_view

if TYPE_CHECKING:
    from payments.admin.resilience import ResilienceAdmin

__all__ = ["PaymentServiceAdminSite"]


class PaymentServiceAdminSite(admin.AdminSite):
    """``/admin/``: the registered models' pages and the acquirer resilience page.

    URL names are the admin's own (``admin:<app>_<model>_...``) plus
    ``admin:payments_resilience``, ``admin:payments_resilience_action`` and
    ``admin:two_factor``.
    """

    login_form = AdminLoginForm
    login_template = "admin/otp_login.html"
    # No navigation sidebar: the console's wide tables (the payments list's nine columns, the
    # attempts table, the breakers and their actions) need the width at 1400 px; the
    # breadcrumbs and the index lead everywhere it did.
    enable_nav_sidebar = False

    @cached_property
    def resilience(self) -> ResilienceAdmin:
        """The acquirer resilience page, built on first use: importing ``payments.admin``
        registers its models on this site, so it cannot be imported while the site is made."""
        from payments.admin.resilience import ResilienceAdmin

        return ResilienceAdmin(self)

    def get_urls(self) -> list[URLPattern | URLResolver]:
        """The resilience page's and the two-factor page's routes first, then the admin's
        (models, login, index ...)."""
        two_factor = path("two-factor/", lambda r: two_factor_view(r, self), name="two_factor")
        return [two_factor, *self.resilience.get_urls(), *super().get_urls()]

    def has_permission(self, request) -> bool:
        """Django's rule (an active staff user), and a session verified by a TOTP code when
        ``ADMIN_OTP_REQUIRED`` is on."""
        return super().has_permission(request) and not needs_second_factor(request)

    def login(self, request, extra_context=None):
        """The login page; a staff user logged in with a password only while a second factor
        is required goes on to the two-factor page (enrolment or code)."""
        if needs_second_factor(request):
            target = request.GET.get(REDIRECT_FIELD_NAME) or request.POST.get(REDIRECT_FIELD_NAME)
            url = reverse("admin:two_factor", current_app=self.name)
            return HttpResponseRedirect(url + (f"?{urlencode({'next': target})}" if target else ""))
        return super().login(request, extra_context)

    def get_app_list(self, request, app_label: str | None = None) -> list[dict]:
        """The admin's app list with "Acquirer resilience" under Payments, for those who may
        view it."""
        return self.resilience.add_to_app_list(request, super().get_app_list(request, app_label))

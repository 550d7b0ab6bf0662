"""The project's admin site: Django's, plus the pages that belong to no model.

:class:`PaymentServiceAdminSite` is ``admin.site`` (installed by
:class:`config.apps.PaymentServiceAdminConfig` through ``default_site``): every app registers
its models on it as usual (``@admin.register``), and the site adds the acquirer resilience page
(:class:`payments.resilience_admin.ResilienceAdmin`) to its URLs and to the payments app of its
app list (the index, the app index and the navigation sidebar).
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver

from payments.resilience_admin import ResilienceAdmin

__all__ = ["PaymentServiceAdminSite"]


class PaymentServiceAdminSite(admin.AdminSite):
    """``/admin/``: the registered models' pages and the acquirer resilience page.

    URL names are the admin's own (``admin:<app>_<model>_...``) plus
    ``admin:payments_resilience`` and ``admin:payments_resilience_action``.
    """

    # No navigation sidebar: the console's wide tables (the payments list's nine columns, the
    # attempts table, the breakers and their actions) need the width at 1400 px; the
    # breadcrumbs and the index lead everywhere it did.
    enable_nav_sidebar = False

    def __init__(self, name: str = "admin") -> None:
        super().__init__(name)
        self.resilience = ResilienceAdmin(self)

    def get_urls(self) -> list[URLPattern | URLResolver]:
        """The resilience page's routes first, then the admin's (models, login, index ...)."""
        return [*self.resilience.get_urls(), *super().get_urls()]

    def get_app_list(self, request, app_label: str | None = None) -> list[dict]:
        """The admin's app list with "Acquirer resilience" under Payments, for those who may
        view it."""
        return self.resilience.add_to_app_list(request, super().get_app_list(request, app_label))

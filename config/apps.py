"""The project's replacement of ``django.contrib.admin`` in ``INSTALLED_APPS``."""

from django.contrib.admin.apps import AdminConfig


class PaymentServiceAdminConfig(AdminConfig):
    """``django.contrib.admin`` with :class:`config.admin.PaymentServiceAdminSite` as
    ``admin.site`` (same app label ``admin``, same templates, same autodiscovery)."""

    default_site = "config.admin.PaymentServiceAdminSite"

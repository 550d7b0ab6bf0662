"""The project's replacement of ``django.contrib.admin`` in ``INSTALLED_APPS``."""

from django.contrib.admin.apps import AdminConfig


class PaymentServiceAdminConfig(AdminConfig):
    """``django.contrib.admin`` with :class:`config.admin.PaymentServiceAdminSite` as
    ``admin.site`` (same app label ``admin``, same templates, same autodiscovery). As the
    project's own app config, it also registers the production checks (``config/checks.py``)."""

    default_site = "config.admin.PaymentServiceAdminSite"

    def ready(self) -> None:
        super().ready()
        from config import checks  # noqa: F401  (registers the system checks)

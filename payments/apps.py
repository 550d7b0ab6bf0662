from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    """The merchant API, the payment state machine and the acquirer wiring."""

    name = "payments"
    default_auto_field = "django.db.models.BigAutoField"

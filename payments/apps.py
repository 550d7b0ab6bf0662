from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    """The merchant API, the payment state machine and the acquirer wiring."""

    name = "payments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from payments import checks  # noqa: F401  (registers the system checks)

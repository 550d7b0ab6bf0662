from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    """The Idempotency-Key contract, generic: it knows nothing of payments."""

    name = "idempotency"
    default_auto_field = "django.db.models.BigAutoField"

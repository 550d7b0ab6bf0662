from django.apps import AppConfig


class MerchantsConfig(AppConfig):
    """Merchants (the API's clients) and their API keys."""

    name = "merchants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from merchants import schema  # noqa: F401  (registers the OpenAPI auth extension)

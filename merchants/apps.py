from django.apps import AppConfig


class MerchantsConfig(AppConfig):
    """Merchants (the API's clients) and their API keys."""

    name = "merchants"
    default_auto_field = "django.db.models.BigAutoField"

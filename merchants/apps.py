from django.apps import AppConfig


class MerchantsConfig(AppConfig):
    """Merchants (the API's clients) and their API keys."""

    name = "merchants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from merchants import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from merchants.authentication import api_key_cache_clear
        from merchants.models import ApiKey, Merchant

        # A key revoked or a merchant changed in this process is never served from its cache.
        for model in (ApiKey, Merchant):
            post_save.connect(api_key_cache_clear, sender=model, dispatch_uid=f"cache-{model}")
            post_delete.connect(api_key_cache_clear, sender=model, dispatch_uid=f"cache-{model}")

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    """The ledger audit: our payments against the acquirer's records, for operators."""

    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    """The ledger audit: our payments against the acquirer's records, for operators."""

    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Serve the last audit's result at ``/metrics`` (ledger/metrics.py)."""
        from ledger.metrics import LedgerAuditCollector
        from payments.monitoring.views import scrape_collector_register

        scrape_collector_register(LedgerAuditCollector())

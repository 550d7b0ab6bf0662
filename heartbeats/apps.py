from django.apps import AppConfig


class HeartbeatsConfig(AppConfig):
    """Heartbeats of the long-running processes (Celery workers and beat), for metrics and
    health checks."""

    name = "heartbeats"
    default_auto_field = "django.db.models.BigAutoField"

"""Project wiring: settings, Celery app, URLs, WSGI. No business logic lives here."""

from config.celery_app import app as celery_app

__all__ = ["celery_app"]

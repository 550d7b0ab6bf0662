"""The Celery application.

Settings come from Django settings under the ``CELERY_`` namespace (see
``config/settings/base.py``). Tasks are discovered in the installed apps.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("payment_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

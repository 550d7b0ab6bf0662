"""WSGI entry point, served by gunicorn (see Procfile).

Defaults to the production settings: a process started without ``DJANGO_SETTINGS_MODULE``
fails closed (``make run`` and the tests choose theirs). A system check at Error level (a
missing production variable among them, config/checks.py) makes every worker exit at boot, and
gunicorn with it, before anything is served.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

application = get_wsgi_application()

from config.checks import refuse_to_start_on_errors  # noqa: E402  (needs the app registry)

refuse_to_start_on_errors("web")

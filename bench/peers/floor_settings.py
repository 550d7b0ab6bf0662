"""Bench-only settings for the stack floor (``bench/peers/floor_views.py``): the service's own
settings (``config.settings.local``) with no middleware and only the floor's routes
(``floor_urls.py``), so that a request costs what gunicorn, Django's request handling, psycopg
and httpx cost and nothing of the service's.
"""

from config.settings.local import *  # noqa: F403

ROOT_URLCONF = "bench.peers.floor_urls"
MIDDLEWARE: list[str] = []
# The admin's checks want its middleware; the floor serves no admin page.
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410"]

"""Settings for a developer's machine (`make run`): the embedded PostgreSQL by default."""

from config.embedded_db import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
DATABASES = database_settings(env, allow_embedded=True)

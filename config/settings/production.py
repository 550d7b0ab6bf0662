"""Settings for production: secrets and the database must come from the environment."""

from config.embedded_db import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import env

SECRET_KEY = env("DJANGO_SECRET_KEY")
DATABASES = database_settings(env, allow_embedded=False)
ACQUIRER_API_KEY = env("ACQUIRER_API_KEY")
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
# Every gunicorn and Celery process must share the rate gate and retry budget.
ACQUIRER_STATE_REDIS_URL = env("ACQUIRER_STATE_REDIS_URL")
DEBUG = False
PAYMENTS_CRASH_POINT = ""  # crash injection is for fault campaigns, never production
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# Staff log in to the admin with a second factor (django-otp TOTP; ADR 0019).
ADMIN_OTP_REQUIRED = True

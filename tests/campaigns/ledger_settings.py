"""Test settings with the ledger app installed, for running before config/settings lists it.

``DJANGO_SETTINGS_MODULE=tests.campaigns.ledger_settings pytest ...``; once
``config.settings.base.INSTALLED_APPS`` has "ledger", this module changes nothing.
"""

from config.settings.test import *  # noqa: F403
from config.settings.test import INSTALLED_APPS

if "ledger" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "ledger"]

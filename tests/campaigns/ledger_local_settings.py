"""``config.settings.local`` with the ledger app installed (subprocesses of the campaigns, before
config/settings lists the app); changes nothing once it does."""

from config.settings.local import *  # noqa: F403
from config.settings.local import INSTALLED_APPS

if "ledger" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "ledger"]

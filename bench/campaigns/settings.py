"""The settings the campaign stack runs with: ``config.settings.local``, plus the ledger app
while config does not list it yet (then this module changes nothing)."""

from config.settings.local import *  # noqa: F403
from config.settings.local import INSTALLED_APPS

if "ledger" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "ledger"]

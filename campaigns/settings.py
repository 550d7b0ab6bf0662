"""The settings the campaign stack runs with: ``config.settings.local``, plus the ledger app
while config does not list it yet (then this module changes nothing), plus what the secrets
campaign needs to put card numbers where only a bug or an operator would: a crashing view
(``campaigns/urls.py``) and, with ``CAMPAIGN_BEAT_CARD`` set, a beat entry whose name
and task argument hold that card number (so beat's and the worker's own log lines carry it)."""

from config.settings.local import *  # noqa: F403
from config.settings.local import CELERY_BEAT_SCHEDULE, INSTALLED_APPS, env

if "ledger" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "ledger"]

ROOT_URLCONF = "campaigns.urls"

_BEAT_CARD = env("CAMPAIGN_BEAT_CARD", default="")
if _BEAT_CARD:
    CELERY_BEAT_SCHEDULE = {
        **CELERY_BEAT_SCHEDULE,
        f"campaign card {_BEAT_CARD}": {
            "task": "payments.tasks.reconcile_payment",
            "schedule": 2.0,
            "args": [f"pay_{_BEAT_CARD}"],
        },
    }

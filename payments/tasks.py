"""The payments app's Celery task modules, gathered for Celery's autodiscovery (it imports
``<app>.tasks`` of every installed app). The tasks live in the rooms they belong to
(docs/adr/0037-rooms-inside-payments.md): reconciliation and the beat's upkeep in
:mod:`payments.reconciliation.tasks`, the deferred sweep in
:mod:`payments.authorization.deferred_tasks`, provider notifications in
:mod:`payments.notifications.tasks`. Their Celery names are unchanged
(``payments.tasks.*``, ``payments.deferred_tasks.*``: each sets ``name=``).
"""

from payments.authorization import deferred_tasks
from payments.notifications import tasks as notification_tasks
from payments.reconciliation import tasks

__all__ = ["deferred_tasks", "notification_tasks", "tasks"]

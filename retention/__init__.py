"""Retention: how long every growing table and Redis key is kept, and the beat purge that
deletes the rest (docs/data.md, ADR 0045).

* :mod:`retention.policy`: the periods (``RETENTION_*`` settings, with floors) and the
  inventory, one entry per model of the project (a test fails on a model without one) and one
  per growing Redis key.
* :mod:`retention.purges`: one purge per table, each in batches of short transactions, each
  keeping what is still needed (an unresolved payment's history, a pending delivery, an event
  an operator acted on within the audit period).
* :mod:`retention.tasks`: beat's ``retention.tasks.purge_expired_data``.

Sits above the apps whose rows it deletes (payments, webhooks, merchants, ledger, heartbeats,
Django's admin, sessions and django-axes); nothing imports it but config.
"""

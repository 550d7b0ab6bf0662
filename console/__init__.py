"""Generic building blocks of the operations console (the Django admin), shared by every app.

A plain package, not an app: no models, no templates, no migrations, not in INSTALLED_APPS. It
imports Django only, never a project app, so ``merchants``, ``idempotency`` and ``payments`` may
all import it without an import between them.
"""

"""The operations console (the Django admin): its building blocks, shared by every app, and its
login and cookie handling.

* :mod:`console.admin`, :mod:`console.forms`: generic ``ModelAdmin`` and form helpers.
* :mod:`console.middleware`: the cookie middleware that runs on the console's paths only
  (ADR 0029), named in ``MIDDLEWARE``.
* :mod:`console.two_factor`: the admin login throttled by django-axes with a django-otp second
  factor (ADR 0019), which ``config.admin.PaymentServiceAdminSite`` wires into its URLs. Its
  pages' templates are the project's (``config/templates/admin/``, ``TEMPLATES['DIRS']``).

A plain package, not an app: no models, no migrations, not in INSTALLED_APPS. It imports
Django and its admin plug-ins (django-otp) and ``card_data`` only, never a project app nor
``config``, so ``merchants``, ``idempotency`` and ``payments`` may all import it without an
import between them (ADR 0036).
"""

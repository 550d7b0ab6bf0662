"""The ``ACQUIRERS`` setting's shape: :class:`~acquirers.specs.AcquirerSpec` and
:func:`~acquirers.specs.parse_acquirers` (ADR 0036).

A small plain-Python package below the apps: the settings parse the setting with it at load,
and ``payments`` and ``ledger`` read the parsed specs, so it belongs to neither ``config``
(no app may import ``config``) nor ``payments`` (the settings must not import an app). It
imports no project app; the currencies' validity against ``payments.core.money`` is a system check
of ``payments`` (``payments/checks.py``), not a load-time import.
"""

"""Which source of records the ledger audit reads for each acquirer (docs/connectors.md, "The
ledger audit per provider").

:func:`acquirer_records_from_settings` picks it: ``LEDGER_ACQUIRER_RECORDS`` (a dotted class
path, for every acquirer) when set; else by the acquirer's ``type``: a ``sandbox``'s settlement
listing, a ``stripe``'s listings of PaymentIntents and refunds, an ``adyen``'s answers and
verified notifications.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from acquirers.specs import AcquirerSpec
from ledger.acquirer_records import AcquirerRecords, SandboxAcquirerRecords
from ledger.adyen_records import AdyenAcquirerRecords
from ledger.stripe_records import StripeAcquirerRecords

__all__ = ["acquirer_records_from_settings"]


def acquirer_records_from_settings(spec: AcquirerSpec | None = None) -> AcquirerRecords | None:
    """The source of the records of the acquirer ``spec`` (one of ``ACQUIRERS``; None: the
    ``ACQUIRER_*`` settings' acquirer, a sandbox), as the module docstring says. A class named
    by ``LEDGER_ACQUIRER_RECORDS`` is built with ``base_url`` and ``api_key``. None: no source
    for the type (the audit names the acquirer as not audited)."""
    path = getattr(settings, "LEDGER_ACQUIRER_RECORDS", "")
    if spec is None:
        cls = import_string(path) if path else SandboxAcquirerRecords
        return cls(base_url=settings.ACQUIRER_BASE_URL, api_key=settings.ACQUIRER_API_KEY)
    if path:
        return import_string(path)(base_url=spec.base_url, api_key=spec.api_key)
    if spec.type == "sandbox":
        return SandboxAcquirerRecords(base_url=spec.base_url, api_key=spec.api_key)
    if spec.type == "stripe" and spec.api_version is not None:
        return StripeAcquirerRecords(acquirer=spec.name, base_url=spec.base_url)
    if spec.type == "adyen":
        return AdyenAcquirerRecords(acquirer=spec.name)
    return None

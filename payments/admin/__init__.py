"""payments.admin: the operations console. The payment admin (:mod:`.payment`) and its action
pages (:mod:`.payment_actions`), the refunds list (:mod:`.refund`), the disputes and
acquirer notifications lists (:mod:`.disputes`), the acquirer resilience page
(:mod:`.resilience`), what they share and the attempt table (:mod:`.display`), the operator
actions they call (:mod:`.operator_actions`) and their forms (:mod:`.forms`).

Django's autodiscovery imports ``payments.admin``: importing the registering modules here
registers ``Payment``, ``Refund``, ``Dispute`` and ``AcquirerNotification``.

May import every room below it: payments.operations, payments.authorization,
payments.reconciliation, payments.monitoring, payments.acquirer, payments.core. Never
payments.api.
"""

from payments.admin import disputes, payment, refund

__all__ = ["disputes", "payment", "refund"]

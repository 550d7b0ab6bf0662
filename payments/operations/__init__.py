"""payments.operations: the flows after the authorization, capture, void and refund
(:mod:`.flows`), each a ``PaymentOperation`` through the operation state machine.

May import: payments.authorization (the key claim), payments.reconciliation (to enqueue a
check), payments.monitoring, payments.acquirer, payments.core, payments.models. Never
payments.api or payments.admin.
"""

"""payments.reconciliation: finding out what the acquirer did with a payment or an operation
whose outcome is unknown.

Holds the shared schedule (:mod:`.schedule`: leases, back-off, the due queries), payments
(:mod:`.payments`), operations (:mod:`.operations`), an operation's outcome as the acquirer
notified it (:mod:`.notified`: Adyen's CAPTURE, REFUND, ... for the notification endpoint),
customer actions (:mod:`.actions`: a ``requires_action`` payment's outcome looked up on the
shopper's return, a notification or its expiry; ADR 0049) and the Celery tasks of beat
(:mod:`.tasks`; task names unchanged, ``payments.reconciliation.tasks.*``).

May import: payments.monitoring, payments.acquirer, payments.core, payments.models. Never
payments.authorization, payments.operations, payments.api or payments.admin.
"""

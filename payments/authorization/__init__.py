"""payments.authorization: ``POST /payments`` from the key claim to the recorded outcome.

Holds the idempotency key claim every POST shares (:mod:`.key_claim`), the create flow
(:mod:`.create`) and its phase 1 (:mod:`.phase_one`), failover between acquirers
(:mod:`.failover`), deferral (:mod:`.deferral`) and the sweep that submits deferred payments
(:mod:`.deferred_sweep`, its Celery task :mod:`.deferred_tasks`).

May import: payments.reconciliation (to enqueue a check), payments.monitoring,
payments.acquirer, payments.core, payments.models. Never payments.operations, payments.api or
payments.admin.
"""

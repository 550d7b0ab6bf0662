"""payments.core: the rules of a payment, and every write.

Holds both state machines (:mod:`.payment_states` with the one-statement SQL form of phase 2
beside its ORM twins, :mod:`.operation_states`), money (:mod:`.money`), what an acquirer call
established as plain values (:mod:`.attempts`), the stored answers and the documents they render
(:mod:`.answers`, :mod:`.documents`, :mod:`.problem_format`), the reads every room shares
(:mod:`.selectors`) and the crash points of the tests (:mod:`.crashpoints`).

May import: ``payments.models`` and the apps below payments (idempotency, merchants,
webhooks.outbox, config's request context). Never another room of payments: core never calls the
acquirer and never enqueues a task.
"""

"""payments.notifications: what acquirers push to us (docs/connectors.md, "Notifications";
ADR 0046).

* :mod:`.connectors`: the notification connector of each configured acquirer (gateway_client's
  verifier and parser per provider, built from ``ACQUIRERS``).
* :mod:`.intake`: the endpoint's work: verify on the raw bytes, store first (deduplicated by the
  provider's event identity), enqueue the apply task when the row is committed.
* :mod:`.apply`: apply one stored notification through the state machines: a payment's or a
  refund's is a hint to re-fetch (reconciliation's look-up, now), a dispute's is the record
  (``payments.core.dispute_states``); an early one (our phase 2 not committed) waits.
* :mod:`.tasks`: the Celery tasks (one notification; the beat's sweep of due ones).

May import: payments.reconciliation, payments.monitoring, payments.acquirer, payments.core,
payments.models, gateway_client. Never the create flow, the operation flows, api or admin.
"""

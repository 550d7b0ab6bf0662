"""Signed webhooks from an outbox (ADR 0012).

A state change of a payment or a refund writes an :class:`~webhooks.models.Event` in the same
transaction (:func:`webhooks.outbox.event_record`), with one
:class:`~webhooks.models.Delivery` per subscribed endpoint; delivery happens after commit (a
task enqueued on commit, and a beat sweep of what is due), signed as Standard Webhooks 1.0
says. This app sits below ``payments``: payments imports it, never the reverse.
"""

"""Signed webhooks from an outbox (ADR 0012, ADR 0042).

A state change of a payment or a refund writes an :class:`~webhooks.models.Event`, one row, in
the same transaction (:func:`webhooks.outbox.event_record`); after commit a worker fans it out
into one :class:`~webhooks.models.Delivery` per subscribed endpoint (``webhooks.fanout``) and
delivers them (a task enqueued on commit, and a beat sweep of what is due), picked round robin
across merchants (``webhooks.fairness``), signed as Standard Webhooks 1.0 says. This app sits
below ``payments``: payments imports it, never the reverse.
"""

"""payments.monitoring: what the service says about itself. The Prometheus counters
(:mod:`.metrics`), the ``/metrics`` view and the multiprocess directory's collectors
(:mod:`.views`), and the health checks (:mod:`.health`).

May import: payments.acquirer (its collectors), payments.core, payments.models, and the
metrics of heartbeats and webhooks. Never the flows (authorization, operations,
reconciliation) nor payments.api or payments.admin.
"""

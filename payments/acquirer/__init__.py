"""The Django side of the acquirer: what this project does with :mod:`gateway_client`.

``client`` builds the client and its policies from settings; the other modules of this package
map payments to gateway requests, count the client's events, read and operate its shared state;
``connection`` gives the database connection back to the pool before each call (ADR 0048).
Nothing here imports the payments services; the services stand on this package.

May import: payments.core (what a call established: :mod:`payments.core.attempts`),
payments.models, gateway_client. Never the flows (authorization, operations, reconciliation),
payments.monitoring, payments.api or payments.admin.
"""

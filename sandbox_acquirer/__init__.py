"""A fake upstream card acquirer for tests, demos and benchmarks.

It runs as its own process and speaks real HTTP (``python -m sandbox_acquirer``), so the
payment service's acquirer client is exercised over real sockets: connection handling,
timeouts, idempotency keys and ambiguous outcomes behave as they would against a real
acquirer. See ``docs/sandbox.md`` for the endpoints and the test tokens.

Modules, in import order (each imports only the ones above it; none imports Django, DRF,
Celery or another package of this project, only the standard library):

- ``models``: the charge resource, request validation and canonical JSON.
- ``store``: the in-memory ledger, idempotency records and counters (thread-safe, clock
  injected).
- ``scenarios``: what a ``payment_method`` token makes the acquirer do.
- ``app``: the endpoints as a plain ``Request -> Response`` function (no sockets).
- ``server``: the HTTP/1.1 adapter on ``http.server.ThreadingHTTPServer``.
- ``__main__``: the command line.

This package deliberately imports nothing at package level, so importing one module stays
cheap.
"""

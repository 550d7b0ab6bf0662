# One image for every process of docker-compose.yml (web, worker, beat, sandbox).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config config
COPY console console
COPY merchants merchants
COPY idempotency idempotency
COPY payments payments
COPY ledger ledger
COPY gateway_client gateway_client
COPY merchant_client merchant_client
COPY sandbox_acquirer sandbox_acquirer
COPY manage.py Procfile ./
RUN pip install --no-cache-dir . && python manage.py collectstatic --noinput --verbosity 0
RUN useradd --create-home app && mkdir -p /app/.celery && chown -R app /app/.celery
USER app

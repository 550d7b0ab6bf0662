"""Django system checks for settings that could make the service unsafe."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register

from payments.core.money import CURRENCY_EXPONENTS


@register()
def reconciliation_stops_before_the_acquirer_forgets(app_configs=None, **kwargs) -> list[Error]:
    """The maximum reconciliation age must stay well below (at most half of) the acquirer's
    idempotency key retention: a re-send after the acquirer forgot the key could charge twice."""
    max_age = settings.RECONCILIATION_MAX_AGE_SECONDS
    retention = settings.ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS
    if max_age > retention / 2:
        return [
            Error(
                f"RECONCILIATION_MAX_AGE_SECONDS ({max_age:g}) must be at most half of "
                f"ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS ({retention:g}).",
                hint="A re-send after the acquirer forgot the key could charge the card twice.",
                id="payments.E001",
            )
        ]
    return []


@register()
def task_time_limit_below_reconciliation_lease(app_configs=None, **kwargs) -> list[Error]:
    """A sweep must be killed before its lease ends, or two workers could hold one payment."""
    limit = settings.CELERY_TASK_TIME_LIMIT
    lease = settings.RECONCILIATION_LEASE_SECONDS
    if limit is None or limit >= lease:
        return [
            Error(
                f"CELERY_TASK_TIME_LIMIT_SECONDS ({limit}) must be below "
                f"RECONCILIATION_LEASE_SECONDS ({lease:g}).",
                id="payments.E002",
            )
        ]
    return []


@register()
def deferred_payments_expire_before_reconciliation_gives_up(
    app_configs=None, **kwargs
) -> list[Warning]:
    """A deferred payment submitted at its last moment should still have an hour of
    reconciliation (whose maximum age counts from the payment's creation) before
    ``needs_review``: ``DEFERRED_MAX_AGE_SECONDS`` at most ``RECONCILIATION_MAX_AGE_SECONDS``
    minus 3600. A warning: never a double charge (a late payment goes to a human, not re-sent),
    and test stacks compress reconciliation to seconds."""
    deferred = settings.DEFERRED_MAX_AGE_SECONDS
    reconciliation = settings.RECONCILIATION_MAX_AGE_SECONDS
    if deferred > reconciliation - 3600:
        return [
            Warning(
                f"DEFERRED_MAX_AGE_SECONDS ({deferred:g}) should be at most "
                f"RECONCILIATION_MAX_AGE_SECONDS ({reconciliation:g}) minus 3600.",
                hint="A deferred payment submitted late whose outcome is unknown would go to "
                "needs_review without a re-send.",
                id="payments.W003",
            )
        ]
    return []


@register()
def acquirer_currencies_are_supported(app_configs=None, **kwargs) -> list[Error]:
    """Every currency an acquirer of ``ACQUIRERS`` lists is one the service supports (an ISO
    4217 code of ``payments.core.money.CURRENCY_EXPONENTS``): ``payments.E004`` for each one that is
    not, naming the acquirer and the code (never its URL or key). A currency nobody can pay in
    would route no payment to that acquirer, silently.

    The settings parse ``ACQUIRERS`` (``acquirers.specs.parse_acquirers``) without this list,
    so that loading them imports no app (ADR 0036); this check runs wherever the others do:
    ``manage.py`` commands, and gunicorn and Celery at start (``refuse_to_start_on_errors``)."""
    errors: list[Error] = []
    for spec in getattr(settings, "ACQUIRERS", None) or ():
        for code in sorted((spec.currencies or frozenset()) - frozenset(CURRENCY_EXPONENTS)):
            errors.append(
                Error(
                    f"ACQUIRERS ({spec.name}) currencies: {code} is not a supported ISO 4217 code.",
                    hint="List only the currencies of payments/core/money.py "
                    "(docs/configuration.md, 'Acquirers').",
                    id="payments.E004",
                )
            )
    return errors


@register()
def refund_form_expires_before_its_key(app_configs=None, **kwargs) -> list[Error]:
    """An admin refund form must expire before its one-time idempotency key can be purged:
    ``ADMIN_REFUND_FORM_SECONDS`` positive and below ``IDEMPOTENCY_KEY_RETENTION_SECONDS``
    (payments.admin.operator_actions.admin_refund_form_key)."""
    form = settings.ADMIN_REFUND_FORM_SECONDS
    retention = settings.IDEMPOTENCY_KEY_RETENTION_SECONDS
    if not 0 < form < retention:
        return [
            Error(
                f"ADMIN_REFUND_FORM_SECONDS ({form}) must be above 0 and below "
                f"IDEMPOTENCY_KEY_RETENTION_SECONDS ({retention}).",
                hint="A refund form re-sent after its key was purged would refund again.",
                id="payments.E010",
            )
        ]
    return []

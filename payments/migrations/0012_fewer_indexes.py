"""Fewer indexes on the tables every payment writes (issue 18, ADR 0030): each index of a row
costs an index entry on its INSERT and on every non-HOT UPDATE (a payment's phase-2 UPDATE
changes ``status``, so it is never HOT). Each index dropped here is one that no query needs
(docs/adr/0030-only-the-indexes-a-query-needs.md lists every query and the index it uses):

* the foreign-key index on ``payments_payment.merchant_id``: ``payment_merchant_created`` and
  ``payment_merchant_status`` start with ``merchant_id`` and serve its look-ups (the merchant's
  ``PROTECT`` check included);
* the foreign-key index on ``payments_paymentevent.payment_id`` and its ``_like`` twin:
  ``payment_event_timeline`` (``payment_id``, ``created_at``) serves them;
* the ``varchar_pattern_ops`` (``_like``) indexes Django adds to a ``CharField`` primary key,
  unique field or foreign key to one: they serve only ``LIKE 'prefix%'`` queries, and none of
  this service's queries is one (every search is an exact match; the console's search by id
  lower-cases the term and compares it with ``=``);
* ``payment_merchant_reference`` (merchant, reference) and ``payment_reference_lookup``
  (reference) become one ``payment_reference_merchant`` (reference, merchant): an equality on
  the reference alone (the console) or with the merchant (the API's list filter) is answered
  by it as before; partial (``reference IS NOT NULL``), so payments without one write nothing
  there;
* ``payment_acquirer_reference`` becomes partial (``acquirer_reference IS NOT NULL``) as
  ``payment_acquirer_ref_lookup``: the phase-1 INSERT has none yet, so it writes no entry.

Built and dropped CONCURRENTLY (``atomic = False``), the new indexes before the old ones go,
so applying it blocks no writes and no query is left without its index. Every operation has its
reverse (the implicit indexes are recreated under their Django names).
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

#: (index name, table, column list): indexes Django created implicitly, which its migration
#: state does not list: dropped and recreated by name.
IMPLICIT = [
    ("payments_payment_merchant_id_2ca42133", "payments_payment", "merchant_id"),
    ("payments_payment_id_91e48230_like", "payments_payment", "id varchar_pattern_ops"),
    (
        "payments_payment_acquirer_idempotency_key_a1ebae88_like",
        "payments_payment",
        "acquirer_idempotency_key varchar_pattern_ops",
    ),
    ("payments_paymentevent_payment_id_1fde19d5", "payments_paymentevent", "payment_id"),
    (
        "payments_paymentevent_payment_id_1fde19d5_like",
        "payments_paymentevent",
        "payment_id varchar_pattern_ops",
    ),
]


def drop_implicit(names: list[str]) -> migrations.RunSQL:
    """DROP INDEX CONCURRENTLY of the ``IMPLICIT`` indexes ``names``; the reverse builds them
    again as Django had (one statement each: CONCURRENTLY refuses a transaction block)."""
    rows = [row for row in IMPLICIT if row[0] in names]
    return migrations.RunSQL(
        sql=[f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"' for name, _, _ in rows],
        reverse_sql=[
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON "{table}" ({columns})'
            for name, table, columns in rows
        ],
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("payments", "0011_deferred"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(
                condition=models.Q(("reference__isnull", False)),
                fields=["reference", "merchant"],
                name="payment_reference_merchant",
            ),
        ),
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(
                condition=models.Q(("acquirer_reference__isnull", False)),
                fields=["acquirer_reference"],
                name="payment_acquirer_ref_lookup",
            ),
        ),
        RemoveIndexConcurrently(model_name="payment", name="payment_merchant_reference"),
        RemoveIndexConcurrently(model_name="payment", name="payment_reference_lookup"),
        RemoveIndexConcurrently(model_name="payment", name="payment_acquirer_reference"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="payment",
                    name="merchant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="payments",
                        to="merchants.merchant",
                    ),
                ),
                migrations.AlterField(
                    model_name="paymentevent",
                    name="payment",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="events",
                        to="payments.payment",
                    ),
                ),
            ],
            database_operations=[
                drop_implicit(
                    [
                        "payments_payment_merchant_id_2ca42133",
                        "payments_paymentevent_payment_id_1fde19d5",
                        "payments_paymentevent_payment_id_1fde19d5_like",
                    ]
                ),
            ],
        ),
        # The _like indexes of the primary key and of the unique acquirer_idempotency_key: the
        # migration state never listed them (Django adds them implicitly), so only SQL.
        drop_implicit(
            [
                "payments_payment_id_91e48230_like",
                "payments_payment_acquirer_idempotency_key_a1ebae88_like",
            ]
        ),
    ]

"""Fewer indexes on the webhook outbox (issue 18, ADR 0030): every payment inserts an event and
a delivery per endpoint, one index entry per index each.

* ``webhooks_event``: the foreign-key index on ``merchant_id`` (``event_merchant_created`` and
  ``event_merchant_type`` start with it) and the ``_like`` index of the ``id`` primary key.
* ``webhooks_delivery``: the foreign-key index on ``event_id`` and its ``_like`` twin (the
  unique ``delivery_once`` (event_id, endpoint_id) starts with it), and the ``_like`` twin of
  the ``endpoint_id`` index (the plain one stays: deleting an endpoint looks its deliveries up).

The ``varchar_pattern_ops`` (``_like``) indexes serve only ``LIKE 'prefix%'`` queries, and no
query of the service is one (the console's searches are exact). Dropped CONCURRENTLY
(``atomic = False``); the reverse builds each again under its Django name.
"""

from django.db import migrations, models

#: (index name, table, column list) of the indexes Django created implicitly.
IMPLICIT = [
    ("webhooks_event_merchant_id_29c51e5b", "webhooks_event", "merchant_id"),
    ("webhooks_event_id_136b0861_like", "webhooks_event", "id varchar_pattern_ops"),
    ("webhooks_delivery_event_id_b6f5af91", "webhooks_delivery", "event_id"),
    (
        "webhooks_delivery_event_id_b6f5af91_like",
        "webhooks_delivery",
        "event_id varchar_pattern_ops",
    ),
    (
        "webhooks_delivery_endpoint_id_6cbee67d_like",
        "webhooks_delivery",
        "endpoint_id varchar_pattern_ops",
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
        ("webhooks", "0002_console_roles"),
        ("merchants", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="event",
                    name="merchant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="webhook_events",
                        to="merchants.merchant",
                    ),
                ),
                migrations.AlterField(
                    model_name="delivery",
                    name="event",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="deliveries",
                        to="webhooks.event",
                    ),
                ),
            ],
            database_operations=[
                drop_implicit(
                    [
                        "webhooks_event_merchant_id_29c51e5b",
                        "webhooks_delivery_event_id_b6f5af91",
                        "webhooks_delivery_event_id_b6f5af91_like",
                    ]
                )
            ],
        ),
        # Implicit for the CharField primary key and the endpoint foreign key: only SQL.
        drop_implicit(
            ["webhooks_event_id_136b0861_like", "webhooks_delivery_endpoint_id_6cbee67d_like"]
        ),
    ]

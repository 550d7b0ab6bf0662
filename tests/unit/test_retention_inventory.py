"""The retention inventory is complete: every model has an entry, every purged one a purge,
and docs/data.md names them all (retention/policy.py, ADR 0045)."""

from __future__ import annotations

from pathlib import Path

from django.apps import apps

from retention.policy import INVENTORY, REDIS_KEYS
from retention.purges import PURGES

ROOT = Path(__file__).resolve().parents[2]
#: Purged by a task of its own (payments.tasks.purge_expired_idempotency_keys).
PURGED_ELSEWHERE = {"idempotency.IdempotencyKey"}


def test_every_model_has_a_retention_entry():
    """A model added without an entry in retention.policy.INVENTORY fails here: decide how
    long its rows are kept, and why, before they pile up."""
    models = {model._meta.label for model in apps.get_models()}
    assert sorted(models - set(INVENTORY)) == [], "models without a retention entry"
    assert sorted(set(INVENTORY) - models) == [], "entries of models that do not exist"


def test_every_purged_entry_has_a_purge_and_only_those():
    purged = {label for label, entry in INVENTORY.items() if entry.how == "purged"}
    assert purged - PURGED_ELSEWHERE == set(PURGES)


def test_docs_data_names_every_model_and_redis_key():
    text = (ROOT / "docs/data.md").read_text().replace("\\|", "|")  # a table's escaped |
    missing = [label for label in INVENTORY if f"`{label}`" not in text]
    missing += [key.pattern for key in REDIS_KEYS if f"`{key.pattern}`" not in text]
    assert missing == []

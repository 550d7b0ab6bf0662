"""The migration graph has one leaf per app.

Two branches that each add a migration with the same parent merge cleanly in git yet leave two
leaves, and then ``migrate`` (``make run``, the test database, compose's migrate service)
refuses to run at all. Read from the migration files only: no database.
"""

from django.db.migrations.loader import MigrationLoader


def test_every_app_has_a_single_leaf_migration():
    loader = MigrationLoader(None, ignore_no_migrations=True)

    assert loader.detect_conflicts() == {}

"""Indexes for reviewing the ledger (licensing.console.review; measured in bench/review.py).

On PostgreSQL they are built with CREATE INDEX CONCURRENTLY: every API request waits for its
ledger row's commit, and a plain CREATE INDEX would hold those inserts for the whole build. The
license's own index goes (the new index starts with the license); the foreign key itself is
left alone (Django's AlterField would drop and re-validate it over the whole table). On
PostgreSQL only, a GIN index on the metadata answers the search's jsonpath matches (`@?`); it is
not in the model's Meta, so that SQLite never sees it."""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "licensing_transaction"
LICENSE_INDEX = "licensing_transaction_license_id_e629137d"  # Django's name for the FK index
METADATA_INDEX = "tx_metadata"


def _concurrently(schema_editor) -> str:
    return " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""


class AddIndexWithoutBlockingWrites(migrations.AddIndex):
    """AddIndex, CONCURRENTLY on PostgreSQL."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.add_index(model, self.index, concurrently=True)
        else:
            schema_editor.add_index(model, self.index)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.remove_index(model, self.index, concurrently=True)
        else:
            schema_editor.remove_index(model, self.index)


def drop_license_index(apps, schema_editor):
    quote = schema_editor.quote_name
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(cursor, TABLE)
    for name, info in constraints.items():
        single = info["columns"] == ["license_id"]
        if single and info["index"] and not (info["primary_key"] or info["unique"]):
            schema_editor.execute(f"DROP INDEX{_concurrently(schema_editor)} {quote(name)}")


def create_license_index(apps, schema_editor):
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"CREATE INDEX{_concurrently(schema_editor)} {quote(LICENSE_INDEX)} "
        f"ON {quote(TABLE)} ({quote('license_id')})"
    )


def create_metadata_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {METADATA_INDEX} ON {TABLE} "
            "USING gin (metadata)"
        )


def drop_metadata_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {METADATA_INDEX}")


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("licensing", "0007_transaction_reasons_and_answer_ids"),
    ]

    operations = [
        AddIndexWithoutBlockingWrites(
            model_name="transaction",
            index=models.Index(
                fields=["license", "created_at"],
                include=("credits", "total_tokens", "images"),
                name="tx_license_time",
            ),
        ),
        AddIndexWithoutBlockingWrites(
            model_name="transaction",
            index=models.Index(
                fields=["upstream_id"], name="tx_answer_id_prefix", opclasses=["varchar_pattern_ops"]
            ),
        ),
        migrations.RunPython(create_metadata_index, drop_metadata_index, elidable=False),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="transaction",
                    name="license",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="transactions",
                        to="licensing.license",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_license_index, create_license_index, elidable=False),
            ],
        ),
    ]

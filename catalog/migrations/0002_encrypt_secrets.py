"""Provider credentials encrypted at rest (see core.crypto).

Reversible: going back decrypts the columns (it needs the key they were encrypted with).
"""

from django.db import migrations, models

import core.fields
from core.crypto import seal_columns, unseal_columns

SECRET_FIELDS = ("api_key", "aws_secret_access_key")


def seal(apps, schema_editor):
    seal_columns(apps.get_model("catalog", "Connection"), SECRET_FIELDS)


def unseal(apps, schema_editor):
    unseal_columns(apps.get_model("catalog", "Connection"), SECRET_FIELDS)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]

    operations = [
        # 1. plain text, without the length limit (a token is longer than its plain text)
        *(
            migrations.AlterField("connection", name, models.TextField(blank=True))
            for name in SECRET_FIELDS
        ),
        # 2. encrypt what is there
        migrations.RunPython(seal, unseal),
        # 3. the encrypted field (no schema change: still `text`)
        *(
            migrations.AlterField(
                "connection", name, core.fields.EncryptedTextField(blank=True, max_length=500)
            )
            for name in SECRET_FIELDS
        ),
    ]

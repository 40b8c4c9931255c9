"""JWT issuers' HS256 secrets encrypted at rest (see core.crypto).

Reversible: going back decrypts the column (it needs the key it was encrypted with).
"""

from django.db import migrations, models

import core.fields
from core.crypto import seal_columns, unseal_columns


def seal(apps, schema_editor):
    seal_columns(apps.get_model("licensing", "JwtIssuer"), ("hs256_secret",))


def unseal(apps, schema_editor):
    unseal_columns(apps.get_model("licensing", "JwtIssuer"), ("hs256_secret",))


class Migration(migrations.Migration):
    dependencies = [("licensing", "0001_initial")]

    operations = [
        migrations.AlterField("jwtissuer", "hs256_secret", models.TextField(blank=True)),
        migrations.RunPython(seal, unseal),
        migrations.AlterField(
            "jwtissuer",
            "hs256_secret",
            core.fields.EncryptedTextField(blank=True, max_length=500),
        ),
    ]

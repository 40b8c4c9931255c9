from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core.crypto import Sealed, UndecryptableSecret, rotate
from core.fields import EncryptedTextField


def encrypted_fields():
    """(model, [field names]) for every model with an encrypted column."""
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
        if names:
            yield model, names


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret under the first key of GATEWAY_ENCRYPTION_KEYS. Run it "
        "after putting a new key first; then the old keys can be removed."
    )

    def handle(self, *args, **options):
        rotated, failed = 0, []
        for model, names in encrypted_fields():
            table = model._meta.db_table
            for pk, *values in model.objects.values_list("pk", *names).order_by("pk"):
                updates, old = {}, {}
                for name, value in zip(names, values, strict=True):
                    if not isinstance(value, Sealed):
                        continue
                    where = f"{table}.{name} (id {pk})"
                    try:
                        updates[name] = Sealed(rotate(value.token, where))
                        old[name] = value
                    except UndecryptableSecret:
                        failed.append(where)
                if updates:
                    # Only if unchanged since read (a concurrent save already used the new key).
                    # update() sends no signals: the plain text the caches hold is the same.
                    with transaction.atomic():
                        if model.objects.filter(pk=pk, **old).update(**updates):
                            rotated += len(updates)
        self.stdout.write(f"{rotated} secret(s) re-encrypted under the first key")
        if failed:
            raise CommandError(
                f"{len(failed)} secret(s) could not be decrypted with any configured key "
                f"(left unchanged): {', '.join(failed)}"
            )

from django.core.management.base import BaseCommand, CommandError

from licensing.access.changes import audit_api_key
from licensing.access.credentials import api_key_create_for_days
from licensing.models import License


class Command(BaseCommand):
    help = "Create an API key for a license and print it (only the key; it is not stored)."

    def add_arguments(self, parser):
        parser.add_argument("license_name")
        parser.add_argument("--expires-in-days", type=int, default=None)
        parser.add_argument("--name", default="", help="A label shown in the admin")

    def handle(self, *args, **options):
        try:
            license = License.objects.get(name=options["license_name"])
        except License.DoesNotExist as exc:
            raise CommandError(f"No license named {options['license_name']!r}") from exc
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        row, key = api_key_create_for_days(license=license, name=options["name"], days=days)
        audit_api_key(row, created=True, via="command", actor_name="manage.py create_api_key")
        self.stdout.write(key)

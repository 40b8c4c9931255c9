"""What `scripts/run.sh` sets up before it serves, in one process: each `manage.py` command is
~2 s of Django's start-up, and run.sh ran eight (every browser test and a person's first run
paid them; docs/testing.md)."""

import io
import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from licensing.access.services import license_create
from licensing.models import License


class Command(BaseCommand):
    help = (
        "scripts/run.sh's setup: migrate, collect the static files, load the catalog, the "
        "'demo' license and the 'admin' superuser (if missing), the connections given, and a "
        "new API key for 'demo', printed on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--connection",
            dest="connections",
            action="append",
            nargs="+",
            default=[],
            metavar="SLUG BASE_URL [API_KEY_ENV]",
            help="configure_connection SLUG --base-url BASE_URL [--api-key-env API_KEY_ENV]; "
            "repeat for several",
        )
        parser.add_argument("--key-name", default="", help="the API key's label (create_api_key)")

    def handle(self, *args, connections, key_name, **options):
        call_command("migrate", verbosity=0)
        # Static files (admin, /v1/docs) into STATIC_ROOT, served by WhiteNoise.
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("load_catalog", stdout=self.stdout)
        self._demo_license_and_admin()
        for connection in connections:
            slug, base_url, *env = connection
            more = ["--api-key-env", env[0]] if env else []
            call_command("configure_connection", slug, "--base-url", base_url, *more)
        key = io.StringIO()
        call_command("create_api_key", "demo", "--name", key_name, stdout=key)
        self.stdout.write(key.getvalue().strip())

    def _demo_license_and_admin(self) -> None:
        if not License.objects.filter(name="demo").exists():
            license_create(name="demo", institution="Demo school")
            self.stdout.write("License 'demo' created (unlimited budget, every service)")
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "admin@localhost", password)
            self.stdout.write(f"Admin user created: admin / {password}  (shown once)")

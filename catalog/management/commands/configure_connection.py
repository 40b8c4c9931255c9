from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.models import Provider
from catalog.services import connection_configure


class Command(BaseCommand):
    help = "Create or update a provider connection (base URL and credentials)."

    def add_arguments(self, parser):
        parser.add_argument(
            "slug", help="Provider slug: direct, aggregator, cloud, multimodal, ..."
        )
        parser.add_argument("--name", default="default", help="Connection name (default: default)")
        parser.add_argument("--base-url", required=True)
        parser.add_argument("--api-key", default=None)
        parser.add_argument("--region", default=None)
        parser.add_argument("--aws-access-key-id", default=None)
        parser.add_argument("--aws-secret-access-key", default=None)

    def handle(self, *args, **options):
        try:
            connection = connection_configure(
                provider_slug=options["slug"],
                name=options["name"],
                base_url=options["base_url"],
                api_key=options["api_key"],
                region=options["region"],
                aws_access_key_id=options["aws_access_key_id"],
                aws_secret_access_key=options["aws_secret_access_key"],
            )
        except Provider.DoesNotExist as exc:
            known = ", ".join(Provider.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(
                f"Unknown provider {options['slug']!r} (known: {known}; run load_catalog first)"
            ) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        state = "with credentials" if connection.has_credentials else "WITHOUT credentials"
        self.stdout.write(f"Connection {connection} -> {connection.base_url} ({state})")

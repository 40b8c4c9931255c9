from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.registry import PROVIDER_KINDS
from catalog.services import provider_add


class Command(BaseCommand):
    help = (
        "Add a provider: a slug (what the catalog's rows, X-Service-Provider and the ledger "
        "name) and its kind (the wire protocol). Running it again with the same kind is a no-op."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug", help="e.g. campus-gpu, azure-eu, mistral")
        parser.add_argument(
            "--kind", required=True, help=f"One of: {', '.join(PROVIDER_KINDS)}", metavar="KIND"
        )
        parser.add_argument("--description", default=None)

    def handle(self, *args, **options):
        try:
            provider, created = provider_add(
                slug=options["slug"], kind=options["kind"], description=options["description"]
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        state = "added" if created else "already there"
        self.stdout.write(f"Provider {provider.slug} ({provider.kind}) {state}")
        if created:
            self.stdout.write(
                f"Next: configure_connection {provider.slug} --base-url URL ..., then add_model "
                f"or sync_models with --provider {provider.slug}"
            )

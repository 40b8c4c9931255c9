from django.core.management.base import BaseCommand

from catalog.services import catalog_load_defaults


class Command(BaseCommand):
    help = "Install the default model catalog (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--reset-rows",
            action="store_true",
            help="Also restore the default active/inactive state of existing provider rows.",
        )

    def handle(self, *args, reset_rows=False, **options):
        counts = catalog_load_defaults(reset_rows=reset_rows)
        self.stdout.write(
            "Catalog loaded: "
            f"{counts['providers']} new providers, {counts['models']} new models, "
            f"{counts['rows']} new provider rows."
        )

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.models import Connection, Provider
from catalog.services import models_sync, served_model_ids
from core.outbound import Refused

# What to do when the guard refuses the server's address or port.
GUARD_HINT = {
    "blocked_address": "a server on a private network: add its network to "
    "GATEWAY_OUTBOUND_ALLOW (e.g. 10.0.0.0/8)",
    "blocked_port": "add the port to GATEWAY_OUTBOUND_ALLOWED_PORTS",
    "https_required": "plain http is allowed only for hosts in GATEWAY_OUTBOUND_ALLOW",
}


class Command(BaseCommand):
    help = (
        "Add the models an OpenAI-compatible server serves (GET {base_url}/models) to the "
        "catalog as chat models of its provider. With --price-input and --price-output (USD per "
        "1M tokens; 0 for a campus's own server) their rows serve at once; without, they are "
        "listed but stay inactive until priced."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug", help="The provider (kind openai_compatible)")
        parser.add_argument("--name", default="default", help="Connection name (default: default)")
        parser.add_argument("--price-input", default=None, metavar="USD_PER_1M")
        parser.add_argument("--price-output", default=None, metavar="USD_PER_1M")

    def handle(self, *args, **options):
        slug = options["slug"]
        try:
            ids = served_model_ids(slug, options["name"])
            result = models_sync(
                provider_slug=slug,
                model_ids=ids,
                input_price=options["price_input"],
                output_price=options["price_output"],
            )
        except (Provider.DoesNotExist, Connection.DoesNotExist) as exc:
            raise CommandError(
                f"No connection {slug[:64]}/{options['name'][:64]} (configure_connection first)"
            ) from exc
        except Refused as exc:
            hint = GUARD_HINT.get(exc.code)
            raise CommandError(
                f"Could not read the models of {slug}: {exc.message}"
                + (f" ({hint})" if hint else "")
            ) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self._report(slug, result)

    def _report(self, slug, result):
        self.stdout.write(
            f"{slug}: {len(result.added)} model(s) added, {len(result.rows)} already in the "
            f"catalog; serving: {', '.join(result.active) or 'none'}"
        )
        if result.unpriced:
            self.stdout.write(
                f"Listed without a price, inactive: {', '.join(result.unpriced)}. Price them "
                f"with sync_models {slug} --price-input USD_PER_1M --price-output USD_PER_1M "
                "(0 for your own server), or one by one with add_model MODEL_ID --provider "
                f"{slug} --input-price ... --output-price ..."
            )

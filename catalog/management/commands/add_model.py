from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.models import Provider
from catalog.services import CHAT_MODALITIES, EFFORTS, chat_model_add


def _listed(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class Command(BaseCommand):
    help = (
        "Add or update a chat model (chat completions and /v1/responses) served by a provider, "
        "with its prices in USD per 1M tokens (== micro-credits per token)."
    )

    def add_arguments(self, parser):
        parser.add_argument("model_id", help="The id clients send as `model`")
        parser.add_argument("--provider", required=True, help="The provider slug serving it")
        parser.add_argument(
            "--upstream-id", default=None, help="The id the provider knows (default: MODEL_ID)"
        )
        # Prices are parsed by the service (NaN, infinities, negatives refused there).
        parser.add_argument("--input-price", required=True, metavar="USD_PER_1M")
        parser.add_argument("--output-price", required=True, metavar="USD_PER_1M")
        parser.add_argument(
            "--cached-input-price",
            default=None,
            metavar="USD_PER_1M",
            help="The price of cached input tokens (default: the input price)",
        )
        parser.add_argument(
            "--input-modality",
            default="text",
            help=f"Comma-separated, among {','.join(CHAT_MODALITIES)} (default: text)",
        )
        parser.add_argument(
            "--reasoning-efforts",
            default="",
            help=f"Comma-separated, among {','.join(EFFORTS)}: the efforts the model takes",
        )
        parser.add_argument(
            "--inactive", action="store_true", help="Add the row switched off (enabled later)"
        )

    def handle(self, *args, **options):
        try:
            model, created = chat_model_add(
                model_id=options["model_id"],
                provider_slug=options["provider"],
                upstream_id=options["upstream_id"],
                input_price=options["input_price"],
                output_price=options["output_price"],
                cached_input_price=options["cached_input_price"],
                input_modalities=_listed(options["input_modality"]),
                reasoning_efforts=_listed(options["reasoning_efforts"]),
                active=not options["inactive"],
            )
        except Provider.DoesNotExist as exc:
            raise CommandError(
                f"Unknown provider {options['provider'][:64]!r} (add_provider adds one)"
            ) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        cost = model.cost
        state = "added" if created else "updated"
        row = "inactive" if options["inactive"] else "active"
        self.stdout.write(
            f"Model {model.model_id} {state} on {options['provider']} ({row}): "
            f"{cost['prompt']:g} in / {cost['completion']:g} out USD per 1M tokens"
        )

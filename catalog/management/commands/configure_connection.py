import getpass
import os
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.models import Provider
from catalog.services import connection_configure

# (option, label) of each secret: --OPTION VALUE | --OPTION - (prompt/stdin) | --OPTION-env NAME
SECRETS = (("api_key", "API key"), ("aws_secret_access_key", "AWS secret access key"))


class Command(BaseCommand):
    help = (
        "Create or update a provider connection (base URL and credentials). Give a secret "
        "through an environment variable (--api-key-env NAME) or a prompt (--api-key -): a "
        "value on the command line is visible to every user of the host (ps, /proc)."
    )

    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument(
            "slug", help="Provider slug: direct, aggregator, cloud, multimodal, ..."
        )
        parser.add_argument("--name", default="default", help="Connection name (default: default)")
        parser.add_argument("--base-url", required=True)
        parser.add_argument("--region", default=None)
        parser.add_argument("--aws-access-key-id", default=None)
        parser.add_argument(
            "--weight",
            type=int,
            default=None,
            help="Share of the provider's unpinned traffic, relative to its other connections "
            "(default 1 for a new connection; 0 = standby, used only for failover and pins)",
        )
        parser.add_argument(
            "--tag",
            dest="tags",
            action="append",
            default=None,
            metavar="TAG",
            help="A data-residency tag (e.g. eu, on-premises); repeat for several. Given at "
            "all, the tags replace the connection's; --tag '' clears them.",
        )
        for field, label in SECRETS:
            flag = "--" + field.replace("_", "-")
            group = parser.add_mutually_exclusive_group()
            group.add_argument(
                flag,
                default=None,
                metavar="VALUE",
                help=f"The {label}; '-' prompts for it (or reads a line from standard input). "
                "A value given here is visible in the process list.",
            )
            group.add_argument(
                flag + "-env",
                dest=field + "_env",
                default=None,
                metavar="NAME",
                help=f"Read the {label} from the environment variable NAME.",
            )

    def _secret(self, options, field: str, label: str) -> str | None:
        name = options[field + "_env"]
        if name is not None:
            value = os.environ.get(name)
            if not value:
                raise CommandError(f"The environment variable {name} ({label}) is not set")
            return value
        value = options[field]
        if value != "-":
            return value
        stdin = options.get("stdin") or sys.stdin
        if stdin.isatty():
            value = getpass.getpass(f"{label}: ")
        else:
            value = stdin.readline().rstrip("\r\n")
        if not value:
            raise CommandError(f"No {label} given")
        return value

    def handle(self, *args, **options):
        secrets = {field: self._secret(options, field, label) for field, label in SECRETS}
        try:
            connection = connection_configure(
                provider_slug=options["slug"],
                name=options["name"],
                base_url=options["base_url"],
                region=options["region"],
                aws_access_key_id=options["aws_access_key_id"],
                weight=options["weight"],
                tags=[t for t in options["tags"] if t] if options["tags"] is not None else None,
                **secrets,
            )
        except Provider.DoesNotExist as exc:
            known = ", ".join(Provider.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(
                f"Unknown provider {options['slug']!r} (known: {known}; run load_catalog first)"
            ) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        state = "with credentials" if connection.has_credentials else "WITHOUT credentials"
        extra = f", weight {connection.weight}"
        if connection.tags:
            extra += f", tags {connection.tags}"
        self.stdout.write(f"Connection {connection} -> {connection.base_url} ({state}{extra})")

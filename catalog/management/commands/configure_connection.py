import getpass
import os
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.connection_options import RESPONSES_API, STREAM_USAGE
from catalog.models import Provider
from catalog.services import ModelsEnabled, connection_configure, connection_configure_enabling

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
        self._kind_options(parser)
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

    def _kind_options(self, parser):
        parser.add_argument(
            "--api-version",
            default=None,
            metavar="V",
            help="azure_openai: the api-version of Azure's classic deployment paths (e.g. "
            "2024-10-21); without one the v1 API path is used. '' removes it.",
        )
        parser.add_argument(
            "--deployment-map",
            dest="deployments",
            action="append",
            default=None,
            metavar="MODEL=DEPLOYMENT",
            help="azure_openai: the deployment serving a catalog model, when its name is not the "
            "row's upstream id; repeat for several. Given at all, the map replaces the "
            "connection's; --deployment-map '' clears it.",
        )
        parser.add_argument(
            "--responses-api",
            choices=RESPONSES_API,
            default=None,
            help="openai_compatible: /v1/responses translated to chat completions (chat, the "
            "default) or the server's own Responses API (native)",
        )
        parser.add_argument(
            "--stream-usage",
            choices=STREAM_USAGE,
            default=None,
            help="openai_compatible: ask for usage on streams (ask, the default) or not, for a "
            "server that always sends it and refuses stream_options (always: Mistral's API)",
        )
        parser.add_argument(
            "--enable-models",
            action="store_true",
            help="Switch on the provider's catalog rows that have a price (the defaults ship "
            "inactive); refused for a connection without credentials",
        )

    def _options(self, options) -> dict | None:
        """The Connection.options given (a None value removes the key), or None."""
        given: dict = {}
        if options["api_version"] is not None:
            given["api_version"] = options["api_version"] or None
        if options["deployments"] is not None:
            given["deployments"] = _deployment_map(options["deployments"]) or None
        for key in ("responses_api", "stream_usage"):
            if options[key] is not None:
                given[key] = options[key]
        return given or None

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
        values = {
            "provider_slug": options["slug"],
            "name": options["name"],
            "base_url": options["base_url"],
            "region": options["region"],
            "aws_access_key_id": options["aws_access_key_id"],
            "weight": options["weight"],
            "tags": [t for t in options["tags"] if t] if options["tags"] is not None else None,
            "options": self._options(options),
            **secrets,
        }
        enabled = None
        try:
            if options["enable_models"]:
                connection, enabled = connection_configure_enabling(**values)
            else:
                connection = connection_configure(**values)
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
        if connection.options:
            extra += ", options " + ", ".join(f"{k}={v}" for k, v in connection.options.items())
        self.stdout.write(f"Connection {connection} -> {connection.base_url} ({state}{extra})")
        if enabled is not None:
            self._report(enabled)

    def _report(self, enabled: ModelsEnabled) -> None:
        self.stdout.write(f"Models enabled: {', '.join(enabled.enabled) or 'none new'}")
        if enabled.unpriced:
            self.stdout.write(
                f"Left inactive, without a price: {', '.join(enabled.unpriced)} (add_model sets "
                "one)"
            )


def _deployment_map(values: list[str]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for value in values:
        if not value:
            continue
        model, sep, deployment = value.partition("=")
        if not sep or not model.strip() or not deployment.strip():
            raise CommandError(f"--deployment-map takes MODEL=DEPLOYMENT, not {value[:80]!r}")
        mapping[model.strip()] = deployment.strip()
    return mapping

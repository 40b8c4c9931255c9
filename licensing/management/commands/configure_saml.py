import argparse
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from licensing.models import IdentityProvider
from licensing.signin.saml import (
    SamlSource,
    acs_url_of,
    saml_provider_configure,
    sp_entity_id,
)

from .configure_sso import _institution, _student_license

MAX_FILE = 8 * 1024 * 1024


class Command(BaseCommand):
    help = (
        "Make an institution's identity provider a SAML 2.0 IdP (docs/saml.md) and print the "
        "SP metadata URL and the ACS URL to give it. Role options left out keep their value."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--metadata-url", help="The IdP's metadata URL (https://...)")
        source.add_argument("--metadata-file", help="A file holding the IdP's metadata XML")
        parser.add_argument(
            "--entity-id", help="The IdP's entityID (needed when the metadata lists several)"
        )
        parser.add_argument(
            "--federation-cert",
            metavar="FILE",
            help="PEM certificate that signs the metadata (DFN-AAI, eduGAIN): checked at each "
            "fetch",
        )
        parser.add_argument(
            "--groups-claim", help="The name the groups go by in the role mapping (groups)"
        )
        for role in ("admin", "reviewer", "teacher", "student"):
            parser.add_argument(
                f"--{role}-group",
                action="append",
                dest=f"{role}_groups",
                metavar="G",
                help=f"A memberOf, eduPersonEntitlement or eduPersonAffiliation value whose "
                f"holders get the {role} role (repeatable)",
            )
        parser.add_argument("--student-license", help="The license students land on (name)")
        parser.add_argument("--sso-only", action=argparse.BooleanOptionalAction)
        parser.add_argument("--email-domain", action="append", dest="email_domains", metavar="D")
        parser.add_argument(
            "--base-url", help="The gateway's public URL (default: GATEWAY_PUBLIC_URL)"
        )

    def handle(self, *args, **options):
        institution = _institution(options["institution"])
        existing = IdentityProvider.objects.filter(institution=institution).first()

        def kept(name):
            value = options[name]
            if value is None and existing is not None:
                return getattr(existing, name)
            return value

        mapping = {
            name: kept(name)
            for name in (
                "groups_claim",
                "admin_groups",
                "reviewer_groups",
                "teacher_groups",
                "student_groups",
                "sso_only",
                "email_domains",
            )
        }
        mapping["student_license"] = _student_license(
            options["student_license"], institution, existing
        )
        source = SamlSource(
            metadata_url=options["metadata_url"] or "",
            metadata_xml=_read(options["metadata_file"]),
            entity_id=options["entity_id"] or "",
            federation_cert=_read(options["federation_cert"]),
        )
        try:
            provider = saml_provider_configure(
                institution=institution, source=source, mapping=mapping
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        verb = "created" if existing is None else "updated"
        base = options["base_url"]
        self.stdout.write(f"SAML provider {verb} for {institution.name!r}: {provider.issuer}")
        self.stdout.write(
            f"SP metadata (entityID) to give the IdP: {sp_entity_id(provider.pk, base)}"
        )
        self.stdout.write(
            f"Assertion consumer service (HTTP-POST): {acs_url_of(provider.pk, base)}"
        )


def _read(name: str | None) -> str:
    if not name:
        return ""
    path = Path(name)
    try:
        if path.stat().st_size > MAX_FILE:
            raise CommandError(f"{name} is larger than {MAX_FILE} bytes")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"Cannot read {name}: {exc}") from exc

import argparse
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from licensing.models import IdentityProvider, Institution, License
from licensing.signin.access_rules import rules_file_read
from licensing.signin.sso import identity_provider_configure, redirect_uri_of

GROUP_OPTIONS = ("admin_groups", "reviewer_groups", "teacher_groups", "student_groups")


class Command(BaseCommand):
    help = (
        "Create or update an institution's OpenID Connect provider (docs/sso.md) and print the "
        "redirect URI to register at the IdP. Options left out keep their stored value."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        parser.add_argument("--issuer", required=True, help="The issuer URL (https://...)")
        parser.add_argument("--client-id", required=True)
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument(
            "--client-secret-env",
            metavar="NAME",
            help="The environment variable holding the client secret (read at each sign-in)",
        )
        secret.add_argument(
            "--client-secret",
            metavar="-",
            help="'-': read the client secret from stdin (stored encrypted)",
        )
        parser.add_argument("--groups-claim", help="The id_token claim of groups (groups)")
        for role in ("admin", "reviewer", "teacher", "student"):
            parser.add_argument(
                f"--{role}-group",
                action="append",
                dest=f"{role}_groups",
                metavar="G",
                help=f"A group of the IdP whose members get the {role} role (repeatable)",
            )
        parser.add_argument("--student-license", help="The license students land on (name)")
        parser.add_argument(
            "--rules",
            metavar="FILE",
            help="A JSON file of access rules (docs/access-rules.md), instead of the group "
            "options: the groups mapping is cleared",
        )
        parser.add_argument(
            "--sso-only",
            action=argparse.BooleanOptionalAction,
            help="Refuse local passwords of the institution's users (superusers keep theirs); "
            "--no-sso-only allows them again",
        )
        parser.add_argument(
            "--email-domain",
            action="append",
            dest="email_domains",
            metavar="D",
            help="An e-mail domain of the institution (the login page finds it by them)",
        )
        parser.add_argument(
            "--base-url", help="The gateway's public URL (default: GATEWAY_PUBLIC_URL)"
        )

    def handle(self, *args, **options):
        institution = _institution(options["institution"])
        existing = IdentityProvider.objects.filter(institution=institution).first()
        secret = _client_secret(options, existing)

        def kept(name):
            value = options[name]
            if value is None and existing is not None:
                return getattr(existing, name)
            return value

        license = _student_license(options["student_license"], institution, existing)
        rules = None
        if options["rules"] is not None:
            # Rules replace the groups mapping: the group options given still refuse (not both).
            for name in GROUP_OPTIONS:
                options[name] = options[name] or []
            license = _student_license(options["student_license"], institution, None)
        try:
            if options["rules"] is not None:
                rules = rules_file_read(options["rules"])
            provider = identity_provider_configure(
                institution=institution,
                issuer=options["issuer"],
                client_id=options["client_id"],
                client_secret=secret,
                client_secret_env=options["client_secret_env"],
                groups_claim=kept("groups_claim") or "groups",
                admin_groups=kept("admin_groups"),
                reviewer_groups=kept("reviewer_groups"),
                teacher_groups=kept("teacher_groups"),
                student_groups=kept("student_groups"),
                student_license=license,
                access_rules=rules,
                sso_only=bool(kept("sso_only")),
                email_domains=kept("email_domains"),
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        verb = "created" if existing is None else "updated"
        self.stdout.write(f"Identity provider {verb} for {institution.name!r}: {provider.issuer}")
        self.stdout.write(
            "Register this redirect URI at the IdP: "
            f"{redirect_uri_of(provider.pk, options['base_url'])}"
        )


def _institution(name: str) -> Institution:
    institution = Institution.objects.filter(name=name).first()
    if institution is None:
        known = list(Institution.objects.values_list("name", flat=True)[:20])
        raise CommandError(f"No institution named {name!r}; known: {known}")
    return institution


def _client_secret(options: dict[str, Any], existing: IdentityProvider | None) -> str | None:
    """The secret read from stdin ('-'), or None: a variable names it, or the stored one
    stays."""
    if options["client_secret"] is not None:
        if options["client_secret"] != "-":
            raise CommandError(
                "--client-secret takes '-' (the secret on stdin), never the secret itself "
                "(it would stay in the shell history and the process list)"
            )
        secret = sys.stdin.readline().rstrip("\r\n")
        if not secret:
            raise CommandError("No client secret on stdin")
        return secret
    if options["client_secret_env"] is None and existing is None:
        raise CommandError("A new provider needs --client-secret - or --client-secret-env")
    return None


def _student_license(
    name: str | None, institution: Institution, existing: IdentityProvider | None
) -> License | None:
    """The license named (of the institution), else the stored one."""
    if name:
        license = License.objects.filter(name=name, institution=institution).first()
        if license is None:
            raise CommandError(f"No license named {name!r} in {institution.name!r}")
        return license
    return existing.student_license if existing is not None else None

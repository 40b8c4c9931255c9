from django.core.management.base import BaseCommand, CommandError

from licensing.models import Institution
from licensing.provisioning.services import do_create_scim_token, do_revoke_scim_token


class Command(BaseCommand):
    help = (
        "Create an institution's SCIM bearer token (docs/scim.md) and print it once; --rotate "
        "replaces the active one, --revoke ends it."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--rotate", action="store_true", help="Replace the active token")
        action.add_argument("--revoke", action="store_true", help="Revoke the active token")

    def handle(self, *args, **options):
        institution = Institution.objects.filter(name=options["institution"]).first()
        if institution is None:
            raise CommandError(f"No institution named {options['institution']!r}")
        if options["revoke"]:
            count = do_revoke_scim_token(institution=institution)
            if not count:
                raise CommandError("The institution has no active SCIM token")
            self.stderr.write(f"SCIM token of {institution} revoked.")
            return
        try:
            token = do_create_scim_token(institution=institution, rotate=options["rotate"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"SCIM token of {institution} (shown once; the IdP sends it as a Bearer token):"
        )
        self.stdout.write(token)

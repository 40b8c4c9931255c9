from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.text import is_storable_text
from licensing.models import Course, Institution, License
from licensing.signin.access_rules import rules_file_read
from licensing.signin.lti import MAX_ALLOWANCE, lti_platform_configure, lti_urls


def _clean(value: str, name: str) -> str:
    if not is_storable_text(value):
        raise CommandError(f"{name} holds a NUL or an invalid character")
    return value


def _allowance(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise CommandError(
            f"--allowance is a whole number of micro-credits, not {value!r}"
        ) from None
    if not 0 <= number <= MAX_ALLOWANCE:
        raise CommandError(f"--allowance is between 0 and {MAX_ALLOWANCE}")
    return number


class Command(BaseCommand):
    help = (
        "Create or update an institution's LTI 1.3 platform (its LMS; docs/lti.md) and print "
        "the two URLs to paste into the LMS: login_url and launch_url."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        parser.add_argument("--issuer", required=True, help="The platform's issuer (iss)")
        parser.add_argument("--client-id", required=True, help="The client id the LMS gave")
        parser.add_argument(
            "--deployment-id",
            action="append",
            dest="deployment_ids",
            required=True,
            metavar="ID",
            help="A deployment id of the tool in the LMS (repeatable)",
        )
        parser.add_argument("--jwks-url", required=True, help="The platform's public keyset URL")
        parser.add_argument(
            "--auth-url", required=True, help="The platform's OIDC authentication request URL"
        )
        parser.add_argument(
            "--license", required=True, help="The license of the courses a launch creates"
        )
        parser.add_argument(
            "--allowance",
            help="Default micro-credits per student and period of those courses (none: no limit)",
        )
        parser.add_argument(
            "--allowance-period", choices=Course.Period.values, default=Course.Period.WEEK
        )
        parser.add_argument(
            "--rules",
            metavar="FILE",
            help="A JSON file of access rules on the launch's claims (docs/access-rules.md); "
            "left out: the stored ones stay ([] in the file: roles from the LTI roles claim)",
        )

    def handle(self, *args, **options):
        name = _clean(options["institution"], "The institution")
        institution = Institution.objects.filter(name=name).first()
        if institution is None:
            known = list(Institution.objects.values_list("name", flat=True)[:20])
            raise CommandError(f"No institution named {name!r}; known: {known}")
        license_name = _clean(options["license"], "--license")
        license = License.objects.filter(name=license_name).first()
        if license is None:
            raise CommandError(f"No license named {license_name!r}")
        if license.institution_id != institution.pk:
            raise CommandError(f"The license {license_name!r} belongs to another institution")
        allowance = None
        if options["allowance"] is not None:
            allowance = _allowance(_clean(options["allowance"], "--allowance"))
        try:
            rules = rules_file_read(options["rules"]) if options["rules"] else None
            lti_platform_configure(
                institution=institution,
                issuer=_clean(options["issuer"], "--issuer"),
                client_id=_clean(options["client_id"], "--client-id"),
                deployment_ids=[_clean(d, "--deployment-id") for d in options["deployment_ids"]],
                jwks_url=_clean(options["jwks_url"], "--jwks-url"),
                auth_login_url=_clean(options["auth_url"], "--auth-url"),
                license=license,
                allowance=allowance,
                allowance_period=options["allowance_period"],
                access_rules=rules,
            )
        except ValidationError as exc:
            if hasattr(exc, "error_dict"):
                raise CommandError(
                    "; ".join(f"{field}: {' '.join(m)}" for field, m in exc.message_dict.items())
                ) from exc
            raise CommandError("; ".join(exc.messages)) from exc
        login_url, launch_url = lti_urls()
        self.stdout.write(f"login_url: {login_url}")
        self.stdout.write(f"launch_url: {launch_url}")

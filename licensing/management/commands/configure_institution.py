import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from licensing.access.services import INSTITUTION_SETTINGS, do_configure_institution
from licensing.console.forms import InstitutionForm
from licensing.models import Institution

# The options, each an institution setting (licensing.access.services.INSTITUTION_SETTINGS).
OPTIONS = {
    "timezone": "IANA time zone of its days, weeks, months and course windows (Europe/Berlin)",
    "language": "Default language of its pages (a code of LANGUAGES, e.g. de; '' = gateway's)",
    "currency": "ISO 4217 code shown beside micro-credits (EUR; '' = the gateway's)",
    "micro_credits_per_currency_unit": "Micro-credits worth one unit of the currency",
    "portal_key_limit": "Active API keys one student may hold in the portal",
    "ledger_identity_days": "Days a ledger row keeps who made the request ('' = kept)",
    "audit_log_days": "Days the audit log's rows are kept ('' = kept)",
}


class Command(BaseCommand):
    help = (
        "Set an institution's time zone, language, currency, portal settings and retention (docs/"
        "commands.md); with --create, create it first. Options left out keep their value. "
        "Values are checked as the admin's institution form checks them."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        parser.add_argument(
            "--create", action="store_true", help="Create the institution if it does not exist"
        )
        for name, help_text in OPTIONS.items():
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=help_text)
        parser.add_argument(
            "--terms-file",
            metavar="PATH",
            help="The terms of use students accept in the portal, from a UTF-8 file ('-': stdin)",
        )

    def handle(self, *args, **options):
        institution = _institution(options["institution"], create=options["create"])
        changes = {name: options[name] for name in OPTIONS if options[name] is not None}
        if options["terms_file"] is not None:
            changes["terms_of_use"] = _read(options["terms_file"])
        checked = _checked(institution, changes)
        try:
            do_configure_institution(institution, checked, actor_name="configure_institution")
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        shown = ", ".join(f"{name}={getattr(institution, name)!r}" for name in OPTIONS)
        self.stdout.write(f"Institution {institution.name!r}: {shown}")


def _institution(name: str, *, create: bool) -> Institution:
    found = Institution.objects.filter(name=name).first()
    if found is not None:
        return found
    if not create:
        known = list(Institution.objects.values_list("name", flat=True)[:20])
        raise CommandError(f"No institution named {name!r} (--create makes it); known: {known}")
    return Institution(name=name)


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"--terms-file: {exc}") from exc


def _checked(institution: Institution, changes: dict) -> dict:
    """The changes as the admin's form cleans them, or CommandError naming each problem."""
    current = {name: getattr(institution, name) for name in ("name", *INSTITUTION_SETTINGS)}
    data = {k: "" if v is None else v for k, v in {**current, **changes}.items()}
    form = InstitutionForm(data, instance=institution)
    if not form.is_valid():
        problems = [
            f"--{field.replace('_', '-')}: {' '.join(map(str, errors))}"
            for field, errors in form.errors.items()
        ]
        raise CommandError("; ".join(problems))
    return {name: form.cleaned_data[name] for name in changes}

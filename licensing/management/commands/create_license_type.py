from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.text import is_storable_text
from licensing.access.services import do_create_license_type
from licensing.models import Institution
from licensing.rules.presets import PRESETS


class Command(BaseCommand):
    help = (
        "Create an institution's license type from an age-group preset (docs/presets.md): a "
        "starting policy and guardrails to adapt, not legal advice."
    )

    def add_arguments(self, parser):
        parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
        parser.add_argument("--institution", required=True, help="The institution's name")
        parser.add_argument("--name", default="", help="The license type's name (the preset's)")

    def handle(self, *args, **options):
        name = options["institution"]
        if not is_storable_text(name) or not is_storable_text(options["name"]):
            raise CommandError("A name holds a NUL or an invalid character")
        institution = Institution.objects.filter(name=name).first()
        if institution is None:
            raise CommandError(f"No institution named {name!r}")
        try:
            license_type = do_create_license_type(
                preset=options["preset"],
                institution=institution,
                name=options["name"],
                actor_name="manage.py create_license_type",
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        services = ", ".join(license_type.policy["services"])
        self.stdout.write(
            f"License type {license_type.name!r} (id {license_type.pk}) created for "
            f"{institution.name!r} from the preset {options['preset']!r}: {services}"
        )

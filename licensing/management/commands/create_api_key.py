from django.core.management.base import BaseCommand, CommandError

from licensing.access.changes import audit_api_key
from licensing.access.credentials import api_key_create_for_days
from licensing.models import ApiKey, Course, License


class Command(BaseCommand):
    help = (
        "Create an API key for a license and print it (only the key; it is not stored). "
        "--front-end makes a front-end key: a chat front end such as Open WebUI acting for the "
        "students its requests name (docs/open-webui.md)."
    )

    def add_arguments(self, parser):
        parser.add_argument("license_name")
        parser.add_argument("--expires-in-days", type=int, default=None)
        parser.add_argument("--name", default="", help="A label shown in the admin")
        parser.add_argument(
            "--front-end",
            action="store_true",
            help="A front-end key: acts for the students Open WebUI's user headers name",
        )
        parser.add_argument(
            "--course",
            metavar="CODE",
            help="With --front-end: act only within this course of the license",
        )

    def handle(self, *args, **options):
        try:
            license = License.objects.get(name=options["license_name"])
        except License.DoesNotExist as exc:
            raise CommandError(f"No license named {options['license_name']!r}") from exc
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        if options["course"] is not None and not options["front_end"]:
            raise CommandError("--course goes with --front-end")
        kind = ApiKey.Kind.FRONT_END if options["front_end"] else ApiKey.Kind.STANDARD
        course = _course(license, options["course"])
        row, key = api_key_create_for_days(
            license=license, name=options["name"], days=days, kind=kind, course=course
        )
        audit_api_key(row, created=True, via="command", actor_name="manage.py create_api_key")
        self.stdout.write(key)


def _course(license: License, code: str | None) -> Course | None:
    if code is None:
        return None
    course = Course.objects.filter(license=license, code=code).first()
    if course is None:
        raise CommandError(f"No course {code!r} on the license {license.name!r}")
    return course

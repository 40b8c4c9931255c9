import getpass
import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from licensing.access.audit import audit_event_record
from licensing.access.services import institution_admin_create
from licensing.models import AdminProfile, AuditEvent


class Command(BaseCommand):
    help = (
        "Create a staff user of one institution with a role (admin or reviewer). The password "
        "is prompted for, or with --noinput read from DJANGO_SUPERUSER_PASSWORD."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        parser.add_argument("username")
        parser.add_argument("--role", choices=AdminProfile.Role.values, default="admin")
        parser.add_argument("--email", default="", help="Where budget alerts go (admins)")
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="Take the password from DJANGO_SUPERUSER_PASSWORD instead of prompting",
        )

    def _password(self, interactive: bool) -> str:
        if not interactive:
            password = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
            if not password:
                raise CommandError("--noinput needs the password in DJANGO_SUPERUSER_PASSWORD")
            return password
        for _ in range(3):
            password = getpass.getpass("Password: ")
            if not password:
                self.stderr.write("The password cannot be empty.")
                continue
            if getpass.getpass("Password (again): ") != password:
                self.stderr.write("The passwords do not match.")
                continue
            return password
        raise CommandError("No password given")

    def handle(self, *args, **options):
        password = self._password(options["interactive"])
        try:
            user = institution_admin_create(
                institution=options["institution"],
                username=options["username"],
                role=options["role"],
                password=password,
                email=options["email"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        profile = user.gateway_profile
        audit_event_record(
            action=AuditEvent.Action.USER_CREATED,
            actor_name="manage.py create_institution_admin",
            institution=profile.institution_id,
            target=f"user:{user.pk}",
            detail={
                "after": {
                    "username": user.username,
                    "email": user.email,
                    "role": profile.role,
                    "active": True,
                }
            },
        )
        self.stdout.write(
            f"User {user.username!r} created: {options['role']} of {options['institution']!r}"
        )

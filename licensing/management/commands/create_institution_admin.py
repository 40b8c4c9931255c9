import getpass
import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from licensing.access.audit import audit_event_record
from licensing.access.services import institution_admin_create
from licensing.courses.services import course_teacher_add
from licensing.models import AdminProfile, AuditEvent, Course

ACTOR = "manage.py create_institution_admin"


class Command(BaseCommand):
    help = (
        "Create a staff user of one institution with a role (admin, reviewer or teacher; a "
        "teacher of the courses named by --course). The password is prompted for, or with "
        "--noinput read from DJANGO_SUPERUSER_PASSWORD."
    )

    def add_arguments(self, parser):
        parser.add_argument("institution", help="The institution's name, as in the admin")
        parser.add_argument("username")
        parser.add_argument("--role", choices=AdminProfile.Role.values, default="admin")
        parser.add_argument("--email", default="", help="Where budget alerts go (admins)")
        parser.add_argument(
            "--course",
            action="append",
            default=[],
            dest="courses",
            metavar="CODE",
            help="With --role teacher: a course of the institution they teach (repeatable)",
        )
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

    def _courses(self, institution: str, role: str, codes: list[str]) -> list[Course]:
        """The courses --course names, all checked before anything is created. Only a teacher
        takes them: an admin already runs every course of the institution, a reviewer none."""
        if not codes:
            return []
        if role != AdminProfile.Role.TEACHER:
            raise CommandError("--course is for --role teacher only")
        if any("\x00" in code for code in codes):  # PostgreSQL cannot even compare it
            raise CommandError("A course code cannot contain NUL")
        found = {
            c.code: c for c in Course.objects.filter(institution__name=institution, code__in=codes)
        }
        unknown = [code for code in dict.fromkeys(codes) if code not in found]
        if unknown:
            raise CommandError(f"No course {', '.join(map(repr, unknown))} in {institution!r}")
        return [found[code] for code in dict.fromkeys(codes)]

    def handle(self, *args, **options):
        courses = self._courses(options["institution"], options["role"], options["courses"])
        password = self._password(options["interactive"])
        with transaction.atomic():  # the user, their role and their courses, or nothing
            user = self._create(options, password, courses)
        taught = f", teaching {', '.join(c.code for c in courses)}" if courses else ""
        self.stdout.write(
            f"User {user.username!r} created: {options['role']} of {options['institution']!r}"
            f"{taught}"
        )

    def _create(self, options, password: str, courses: list[Course]):
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
            actor_name=ACTOR,
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
        for course in courses:
            course_teacher_add(course=course, user=user, actor_name=ACTOR)
        return user

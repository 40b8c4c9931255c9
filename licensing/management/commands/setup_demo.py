"""What `scripts/run.sh` sets up before it serves, in one process: each `manage.py` command is
~2 s of Django's start-up, and run.sh ran eight (every browser test and a person's first run
paid them; docs/testing.md). The demo school's development sign-in is licensing.management.demo.
"""

import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from core.config import get_config
from fake_upstreams import demo as people
from licensing.access.services import license_create
from licensing.management.demo import (
    DemoSchool,
    Plan,
    demo_key,
    demo_school_configure,
    dev_sign_in_plan,
)
from licensing.models import License

# The lines run.sh reads: one per development tool to start, with its address.
TOOL_LINE = "dev-tool: {name} {url}"


class Command(BaseCommand):
    help = (
        "scripts/run.sh's setup: migrate, collect the static files, load the catalog, the "
        "'demo' license and the 'admin' superuser (if missing), the connections given, the "
        "demo school's development sign-in (--dev-idp, --dev-lms: a 'dev-tool: oidc|lti URL' "
        "line for each one configured), and the demo license's API key, on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--connection",
            dest="connections",
            action="append",
            nargs="+",
            default=[],
            metavar="SLUG BASE_URL [API_KEY_ENV]",
            help="configure_connection SLUG --base-url BASE_URL [--api-key-env API_KEY_ENV]; "
            "repeat for several",
        )
        parser.add_argument("--key-name", default="", help="the API key's label (create_api_key)")
        parser.add_argument(
            "--key-file",
            type=Path,
            help="keep the demo key in this file (mode 0600) and use it again while it is a "
            "usable key of 'demo' (default: a new key every time)",
        )
        parser.add_argument(
            "--dev-idp", metavar="URL", help="the development identity provider's address"
        )
        parser.add_argument("--dev-lms", metavar="URL", help="the LMS simulator's address")
        parser.add_argument(
            "--guide",
            type=Path,
            help="write how to sign in to the demo school into this file (default: print it)",
        )

    def handle(self, *args, connections, key_name, key_file, dev_idp, dev_lms, guide, **options):
        call_command("migrate", verbosity=0)
        # Static files (admin, /v1/docs) into STATIC_ROOT, served by WhiteNoise.
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("load_catalog", stdout=self.stdout)
        self._demo_license_and_admin()
        for connection in connections:
            slug, base_url, *env = connection
            more = ["--api-key-env", env[0]] if env else []
            call_command("configure_connection", slug, "--base-url", base_url, *more)
        plan = dev_sign_in_plan(idp_url=dev_idp, lms_url=dev_lms)
        try:
            school = demo_school_configure(plan)
        except ValidationError as exc:
            raise CommandError(
                f"The demo school's development sign-in: {'; '.join(exc.messages)} "
                "(scripts/run.sh lets the gateway reach its tools on 127.0.0.1: "
                "GATEWAY_OUTBOUND_ALLOW, GATEWAY_OUTBOUND_ALLOWED_PORTS)"
            ) from exc
        text = "\n".join(guide_lines(school, plan))
        if guide is not None:
            guide.write_text(text + "\n" if text else "", encoding="utf-8")
        elif text:
            self.stdout.write(text)
        for name, url in (("oidc", plan.idp), ("lti", plan.lms)):
            if url:
                self.stdout.write(TOOL_LINE.format(name=name, url=url))
        key, _ = demo_key(
            license=License.objects.get(name="demo"), key_file=key_file, name=key_name
        )
        self.stdout.write(key)

    def _demo_license_and_admin(self) -> None:
        if not License.objects.filter(name="demo").exists():
            license_create(name="demo", institution="Demo school")
            self.stdout.write("License 'demo' created (unlimited budget, every service)")
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "admin@localhost", password)
            self.stdout.write(f"Admin user created: admin / {password}  (shown once)")


def guide_lines(school: DemoSchool | None, plan: Plan) -> list[str]:
    """How to sign in to the demo school as each kind of person, and why a tool is not used."""
    lines = [f"No development sign-in: {note}." for note in plan.notes]
    if school is None:
        return lines
    site = get_config().GATEWAY_PUBLIC_URL.rstrip("/")
    button = f'"Sign in with {people.INSTITUTION}"'
    names = {role: [p.name for p in people.PEOPLE if p.role == role] for role in people.GROUPS}
    course = f"{people.COURSE.title} ({people.COURSE.code})"
    lines.append(
        f"Sign in to {people.INSTITUTION} with its DEVELOPMENT tools (made-up people, no "
        "passwords: not for real use):"
    )
    if school.idp:
        lines += [
            f"  Identity provider: {school.idp}/ (a page listing the demo people)",
            f"  As a student: {site}/portal/ -> {button} -> {' or '.join(names['student'])}",
            f"  As a teacher: {site}/portal/courses/{school.course.pk}/ -> {button} -> "
            f"{names['teacher'][0]} (the course {course})",
            f"  As an admin:  {site}/admin/ -> {button} -> {names['admin'][0]} "
            "(or the user admin with the password printed on the first run)",
        ]
    if school.lms:
        lines.append(
            f"  From the LMS: {school.lms}/ (the course {course}) -> Launch as "
            f"{names['student'][0]} (student) or {names['teacher'][0]} (teacher)"
        )
    return lines

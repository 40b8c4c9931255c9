import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from licensing.access.changes import audit_row_change
from licensing.access.services import DEFAULT_INSTITUTION, license_create


class Command(BaseCommand):
    help = "Create a license (and, with --policy-file, its own license type)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--institution", default=DEFAULT_INSTITUTION)
        parser.add_argument("--policy-file", default=None, help="JSON policy document")
        budget = parser.add_mutually_exclusive_group()
        budget.add_argument("--limit", type=int, default=None, help="Micro-credits per period")
        budget.add_argument("--unlimited", action="store_true", help="No budget limit (default)")
        parser.add_argument(
            "--period", default="lifetime", help="daily, weekly, monthly or lifetime"
        )
        parser.add_argument("--strategy", default="pooled", help="pooled or per_user")

    def handle(self, *args, **options):
        policy = None
        if options["policy_file"]:
            try:
                with open(options["policy_file"], encoding="utf-8") as handle:
                    policy = json.load(handle)
            except (OSError, ValueError) as exc:
                raise CommandError(f"Cannot read policy file: {exc}") from exc
        try:
            license = license_create(
                name=options["name"],
                institution=options["institution"],
                policy=policy,
                limit=None if options["unlimited"] else options["limit"],
                period=options["period"],
                strategy=options["strategy"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        me = "manage.py create_license"
        if policy is not None:  # its own license type, made with it
            audit_row_change(license.license_type, None, actor_name=me)
        audit_row_change(license, None, actor_name=me)
        limit = "unlimited" if license.budget_limit is None else f"{license.budget_limit:,}"
        self.stdout.write(
            f"License {license.name!r} created (type {license.license_type.name!r}, "
            f"budget {limit} micro-credits, {license.budget_period}, {license.budget_strategy})"
        )

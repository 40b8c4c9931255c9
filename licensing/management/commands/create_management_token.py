from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError

from licensing.access.tokens import management_token_get_or_create


class Command(BaseCommand):
    help = (
        "Print the management API token of a user (created on first use, and then audited); "
        "clients send `Authorization: Token <token>` to /manage/v1/. Only the token is printed."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}")
        try:
            key = management_token_get_or_create(
                user=user, actor_name="manage.py create_management_token"
            )
        except PermissionDenied as exc:
            raise CommandError(
                "This user has no access: make it a superuser or give it an institution role "
                "(create_institution_admin, or the user form in the admin)"
            ) from exc
        self.stdout.write(key)

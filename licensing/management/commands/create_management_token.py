from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from licensing.access.scoping import NOBODY, scope_of


class Command(BaseCommand):
    help = (
        "Print the management API token of a user (created on first use); clients send "
        "`Authorization: Token <token>` to /manage/v1/. Only the token is printed."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}")
        if scope_of(user) == NOBODY:
            raise CommandError(
                "This user has no access: make it a superuser or give it an institution role "
                "(create_institution_admin, or the user form in the admin)"
            )
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)

from django.core.management.base import BaseCommand

from core.crypto import generate_key


class Command(BaseCommand):
    help = "Print a new key for GATEWAY_ENCRYPTION_KEYS (docs/deployment.md, 'Secrets at rest')."
    requires_system_checks = []

    def handle(self, *args, **options):
        self.stdout.write(generate_key())

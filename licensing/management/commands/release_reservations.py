"""Release the budget holds that expired: a worker that died between a request's budget step and
its ledger row left them (licensing.ledger.reservations).

The gateway releases a wallet's expired holds itself before it refuses a request on it; this is
for an operator who wants the wallets' `reserved` tidy now, or from a daily job."""

from django.core.management.base import BaseCommand

from licensing.ledger.reservations import SWEEP_BATCH, release_expired


class Command(BaseCommand):
    help = "Release the budget reservations that expired (left by worker processes that died)."

    def handle(self, *args, **options):
        released = 0
        while True:
            batch = release_expired()
            released += batch
            if batch < SWEEP_BATCH:
                break
        self.stdout.write(f"{released} expired budget reservations released")

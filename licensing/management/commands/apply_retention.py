"""Delete what the institutions keep only for a while: the safeguarding alerts (and the flagged
messages they hold) older than each institution's retention period (default 30 days).

Run it daily (cron, docs/deployment.md). Later kinds of data with a retention period (the
ledger's and the audit log's, issue 39 item 3) are to be added here."""

from django.core.management.base import BaseCommand

from licensing.safeguarding.services import do_apply_retention


class Command(BaseCommand):
    help = "Delete data older than its institution's retention period (safeguarding alerts)."

    def handle(self, *args, **options):
        deleted = do_apply_retention()
        total = sum(deleted.values())
        self.stdout.write(
            f"safeguarding alerts: {total} deleted"
            + "".join(f"\n  institution {pk}: {count}" for pk, count in sorted(deleted.items()))
        )

"""Apply each institution's retention periods (licensing.privacy.retention): the ledger forgets
who made a request, the audit log and the safeguarding alerts are deleted, when past their time.

Run it daily (cron, or the compose file's `retention` service; docs/deployment.md). Idempotent:
a day missed is caught up by the next run."""

from dataclasses import asdict

from django.core.management.base import BaseCommand

from licensing.privacy.retention import do_apply_retention

LABELS = {
    "ledger_rows": "ledger rows pseudonymised",
    "wallets": "wallets pseudonymised",
    "budget_alerts": "budget alerts pseudonymised",
    "audit_rows": "audit rows deleted",
    "safeguarding_alerts": "safeguarding alerts deleted",
}


class Command(BaseCommand):
    help = (
        "Apply the retention periods: pseudonymise old ledger rows, delete old audit rows and "
        "safeguarding alerts (every sum unchanged)."
    )

    def handle(self, *args, **options):
        applied = do_apply_retention()
        totals = dict.fromkeys(LABELS, 0)
        for done in applied.values():
            for name, count in asdict(done).items():
                totals[name] += count
        for name, label in LABELS.items():
            self.stdout.write(f"{label}: {totals[name]}")
        for pk, done in sorted(applied.items(), key=lambda item: (item[0] is None, item[0] or 0)):
            if done.any():
                changed = ", ".join(f"{LABELS[k]} {v}" for k, v in asdict(done).items() if v)
                self.stdout.write(
                    f"  {'gateway-wide' if pk is None else f'institution {pk}'}: {changed}"
                )

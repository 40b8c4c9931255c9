"""Write the ledger entries that waited in the spool during a database outage.

Running gateway processes replay on their own once the database answers; this is for an
operator who wants it done now (or for a host whose gateway is not running any more)."""

from django.core.management.base import BaseCommand, CommandError

from licensing.ledger.actions import spool_replay
from licensing.ledger.spool import (
    REJECTED,
    UNAVAILABLE,
    spool_depth,
    spool_dir,
    spool_rejected,
)


class Command(BaseCommand):
    help = "Write spooled ledger entries (kept while the database was unavailable)."

    def handle(self, *args, **options):
        try:
            written, skipped = spool_replay()
        except UNAVAILABLE as exc:
            raise CommandError(f"The database is still unavailable: {exc}") from exc
        # "waiting": entries a later replay will write (the database is back, but a writer
        # appended meanwhile); rejected ones never will and are counted apart.
        waiting, rejected = spool_depth(), spool_rejected()
        self.stdout.write(
            f"{written} written, {skipped} already in the ledger, {waiting} waiting, "
            f"{rejected} rejected (spool: {spool_dir()})"
        )
        if rejected:
            self.stderr.write(
                f"{rejected} entries the database refused are kept in "
                f"{spool_dir() / REJECTED} for an operator"
            )

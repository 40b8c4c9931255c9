"""Write the ledger entries that waited in the spool during a database outage.

Running gateway processes replay on their own once the database answers; this is for an
operator who wants it done now (or for a host whose gateway is not running any more)."""

from django.core.management.base import BaseCommand, CommandError

from licensing.spool import UNAVAILABLE, spool_depth, spool_dir, spool_replay


class Command(BaseCommand):
    help = "Write spooled ledger entries (kept while the database was unavailable)."

    def handle(self, *args, **options):
        try:
            written, skipped = spool_replay()
        except UNAVAILABLE as exc:
            raise CommandError(f"The database is still unavailable: {exc}") from exc
        waiting = spool_depth()
        self.stdout.write(
            f"{written} written, {skipped} already in the ledger, {waiting} waiting "
            f"(spool: {spool_dir()})"
        )
        if (spool_dir() / "rejected.jsonl").exists():
            self.stderr.write(
                f"Entries the database refused are kept in {spool_dir()}/rejected.jsonl"
            )

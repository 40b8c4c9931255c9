"""A rolling upgrade: for a while, workers of the previous release write ledger rows beside the
new ones. Their INSERT names only the columns they know; the columns added since (issue 24's
`attempts` and `failovers`) have database defaults, so those rows still go in, on both
databases, and read as one attempt with no failover."""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from licensing.models import Transaction, Wallet

ADDED = {"attempts", "failovers"}


def _insert_known_columns(row, added: set[str]) -> None:
    """INSERT `row` naming only the columns a previous release knew (all but `added`)."""
    model = type(row)
    fields = [f for f in model._meta.concrete_fields if not f.primary_key and f.name not in added]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    values = [f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})", values
        )


def test_a_previous_release_s_wallet_goes_in_with_nothing_reserved(license):
    """Issue 40's `reserved`: a previous release's worker opening a wallet does not name it."""
    wallet = Wallet(
        license=license,
        holder="license",
        period="daily",
        window_start=timezone.now(),
        unit="micro_credits",
        spent=0,
    )
    _insert_known_columns(wallet, {"reserved"})
    assert Wallet.objects.get(license=license).reserved == 0


def test_a_previous_release_s_row_goes_in_with_the_new_columns_defaults(license):
    row = Transaction(
        created_at=timezone.now(),
        request_id="req-previous-release",
        license=license,
        service="chat_completions",
        requested_model="gpt-4o-mini",
        provider="direct",
        connection="default",
        status_code=200,
        credits=0,
    )
    _insert_known_columns(row, ADDED)
    stored = Transaction.objects.get(request_id="req-previous-release")
    assert (stored.attempts, stored.failovers) == (1, "")

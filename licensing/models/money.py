"""The money: wallets (spend per holder and window), the ledger (Transaction, its Outcome)
and budget alerts."""

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .institutions import License
from .keys import ApiKey, EndUser


class Wallet(models.Model):
    """Spend of one budget holder (the license, a key or an end user) in one window."""

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="wallets")
    holder = models.CharField(max_length=100, help_text=_("license, key:<id> or user:<id>"))
    period = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    unit = models.CharField(max_length=32)
    spent = models.BigIntegerField(default=0)
    # The sum of this wallet's Reservation rows: credits held by requests in flight, counted
    # as spent by the budget check (licensing.ledger.reservations). A default in the database
    # too: a worker of the previous release opens wallets during a rolling upgrade.
    reserved = models.BigIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-window_start", "license__name", "holder"]
        constraints = [
            models.UniqueConstraint(
                fields=["license", "holder", "period", "window_start"], name="uniq_wallet_window"
            )
        ]

    def __str__(self):
        return f"{self.license.name} {self.holder} {self.period} {self.window_start:%Y-%m-%d}"


class Reservation(models.Model):
    """Credits a request in flight holds on a wallet between its budget check and its ledger
    row, which releases them (licensing.ledger.reservations). One left by a worker that died
    is released once it expires."""

    # Only the request id is indexed (every charge deletes by it): the table holds the requests
    # in flight, a few hundred rows, which the rare sweep and a wallet's deletion scan whole;
    # each index more is a write more on every request. By `Meta.indexes`, not `db_index`: on
    # PostgreSQL a CharField's `db_index` adds a second (`varchar_pattern_ops`) index for LIKE,
    # which nothing here asks.
    wallet = models.ForeignKey(
        Wallet, on_delete=models.CASCADE, related_name="reservations", db_index=False
    )
    request_id = models.CharField(max_length=64)
    amount = models.BigIntegerField()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["request_id"], name="reservation_request")]

    def __str__(self):
        return f"{self.request_id} {self.amount} on wallet {self.wallet_id}"


class Outcome(models.TextChoices):
    """A ledger row's status class, for reviewers (decided by the pipeline's step that ended
    the request, see licensing.ledger.record's codes)."""

    SUCCESS = "success", _("Success")
    CLIENT_ERROR = "client_error", _("Client error")
    DENIED = "denied", _("Denied by the gateway")
    FAILURE = "failure", _("Provider or gateway failure")


class Transaction(models.Model):
    """One row per request that reached the provider call, and one per refusal after the
    caller was identified (0 credits, no wallet). Never updated or deleted."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Unique: a spooled entry replayed after its first write did commit is recognised by it.
    request_id = models.CharField(max_length=64, unique=True)
    # Indexed by `tx_license_time` below (license first), not by an index of its own.
    license = models.ForeignKey(
        License, on_delete=models.PROTECT, related_name="transactions", db_index=False
    )
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    end_user = models.ForeignKey(
        EndUser, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    wallet = models.ForeignKey(
        Wallet, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    # The course that paid (its allowance and pool), when the caller is a course member.
    course = models.ForeignKey(
        "Course",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="transactions",
        db_index=False,
    )
    service = models.CharField(max_length=64, db_index=True)
    requested_model = models.CharField(max_length=200)
    billed_model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=64)
    connection = models.CharField(max_length=64, blank=True)
    # Defaults in the database too: rows written by code that does not know the columns (a
    # worker of the previous release during a rolling upgrade, SQL) still go in.
    attempts = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text=_("Provider calls made for the request (0: refused before any)"),
    )
    failovers = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text=_("The attempts that failed before the last: connection and reason"),
    )
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.BigIntegerField(null=True, blank=True)
    completion_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    images = models.IntegerField(null=True, blank=True)
    megapixels = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    units = models.IntegerField(
        null=True, blank=True, help_text=_("Searches made or pages fetched (web_search, fetch)")
    )
    credits = models.BigIntegerField(default=0, help_text=_("Micro-credits charged"))
    metadata = models.JSONField(default=dict, blank=True)
    latency_ms = models.IntegerField(default=0)
    upstream_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        verbose_name=_("answer id"),
        help_text=_("The id of the provider's answer (chatcmpl-..., resp_...) a user may quote"),
    )
    outcome = models.CharField(
        max_length=16,
        choices=Outcome.choices,
        default=Outcome.SUCCESS,
        verbose_name=_("status class"),
    )
    error_code = models.CharField(
        max_length=40, blank=True, default="", help_text=_("Why it failed or was refused")
    )
    error_message = models.CharField(
        max_length=500, blank=True, default="", help_text=_("The reason, sanitized")
    )

    class Meta:
        ordering = ["-created_at"]
        # For the review filters and totals (licensing.console.review), measured in bench/review.py;
        # on PostgreSQL also a GIN index on `metadata` (migration 0008: SQLite has none).
        indexes = [
            # A license's (an institution's: its few licenses) rows in a time range; the
            # totals read the included columns without visiting the table (PostgreSQL).
            models.Index(
                fields=["license", "created_at"],
                include=["credits", "total_tokens", "images"],
                name="tx_license_time",
            ),
            # A course's rows in a time range, for its teachers' per-student usage
            # (licensing.courses.usage); partial: a plain license's insert skips it.
            models.Index(
                fields=["course", "created_at"],
                include=["credits"],
                condition=models.Q(course__isnull=False),
                name="tx_course_time",
            ),
            # Answer-id prefix search (LIKE 'chatcmpl-abc%') in any collation.
            models.Index(
                fields=["upstream_id"],
                opclasses=["varchar_pattern_ops"],
                name="tx_answer_id_prefix",
            ),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.service} {self.credits}"


class BudgetAlert(models.Model):
    """One row per license and budget window whose alert threshold was crossed: the email
    goes out once per window, whatever the concurrency (the unique constraint decides)."""

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="budget_alerts")
    period = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    holder = models.CharField(max_length=100)
    spent = models.BigIntegerField(help_text=_("The wallet's spend after the crossing request"))
    threshold = models.BigIntegerField(help_text=_("Micro-credits"))
    limit = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    recipients = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["license", "period", "window_start"], name="uniq_budget_alert_window"
            )
        ]

    def __str__(self):
        return f"{self.license} {self.window_start:%Y-%m-%d}"

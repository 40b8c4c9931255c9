"""The ledger: one row per request that reached the provider call, written with its charge, and
one row (0 credits, no wallet) per refusal after the caller was identified.

An entry is written, with its wallet's charge, through the ledger's one door
(licensing.ledger.actions); this module is what an entry is: its fields, its outcome and error
codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from core import clock
from core.text import is_storable_text

from ..models import Outcome, Transaction

# Why a request did not succeed (`Transaction.error_code`). The first group are refusals before
# any provider call (0 credits, no wallet); the status class of a code is `outcome_for`'s.
OUT_OF_BUDGET = "out_of_budget"
BUDGET_MISCONFIGURED = "budget_misconfigured"
POLICY_DENIED = "policy_denied"
POLICY_UNAVAILABLE = "policy_unavailable"
RATE_LIMITED = "rate_limited"
PROVIDER_SELECTION = "provider_selection"
GUARDRAIL_BLOCKED = "guardrail_blocked"
MODERATION_UNAVAILABLE = "moderation_unavailable"
LEDGER_UNAVAILABLE = "ledger_unavailable"  # the database down and the spool unwritable
BEFORE_CALL = frozenset(
    {
        OUT_OF_BUDGET,
        BUDGET_MISCONFIGURED,
        POLICY_DENIED,
        POLICY_UNAVAILABLE,
        RATE_LIMITED,
        PROVIDER_SELECTION,
        GUARDRAIL_BLOCKED,
        MODERATION_UNAVAILABLE,
        LEDGER_UNAVAILABLE,
    }
)
PROVIDER_REJECTED = "provider_rejected"
PROVIDER_NOT_FOUND = "provider_not_found"
PROVIDER_UNAVAILABLE = "provider_unavailable"
PROVIDER_ERROR = "provider_error"
CLIENT_DISCONNECTED = "client_disconnected"
STREAM_FAILED = "stream_failed"
INTERNAL_ERROR = "internal_error"
OUTPUT_BLOCKED = "output_blocked"  # the output guardrail: charged (spec)
OUTPUT_MODERATION_UNAVAILABLE = "output_moderation_unavailable"
# Refused by the gateway's own rules (the rest are failures of the provider or the gateway).
DENIED = (BEFORE_CALL - {MODERATION_UNAVAILABLE, LEDGER_UNAVAILABLE}) | {OUTPUT_BLOCKED}
FAILOVERS_MAX = 500  # Transaction.failovers
_error_message_max = Transaction._meta.get_field("error_message").max_length
assert _error_message_max is not None  # a CharField's
ERROR_MESSAGE_MAX: int = _error_message_max


def storable(text: str, limit: int) -> str:
    """Provider-made text as every database takes it: at most `limit` characters, no NUL, no
    lone surrogate (one bad value would fail its whole group-committed batch)."""
    text = text[:limit]
    if is_storable_text(text):
        return text
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def outcome_for(status: int, error_code: str = "") -> str:
    """The status class of a row: what a reviewer filters on."""
    if error_code in DENIED:
        return Outcome.DENIED
    if status < 400 and not error_code:
        return Outcome.SUCCESS
    if 400 <= status < 500:
        return Outcome.CLIENT_ERROR
    return Outcome.FAILURE


@dataclass
class LedgerEntry:
    request_id: str
    license_id: int
    api_key_id: int | None
    end_user_id: int | None
    service: str
    requested_model: str
    billed_model: str
    provider: str
    connection: str
    status_code: int
    attempts: int = 1
    failovers: str = ""
    credits: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    images: int | None = None
    megapixels: Decimal | None = None
    units: int | None = None
    metadata: dict = field(default_factory=dict)
    latency_ms: int = 0
    # On core.clock, like the budget windows the row is charged to (a test moves both at once).
    created_at: datetime = field(default_factory=lambda: clock.utcnow())
    upstream_id: str = ""
    outcome: str = ""  # "": from the status and the error code (outcome_for)
    error_code: str = ""
    error_message: str = ""
    course_id: int | None = None  # a course member's request: the course that paid too
    # Not columns: what the live feed shows and whom it tells (licensing.ledger.feed).
    institution_id: int | None = None
    license_name: str = ""


@dataclass(frozen=True)
class LedgerColumn:
    """One column of the ledger as staff and tools see it, and where it shows. Its label is the
    model field's verbose name (the admin's), so it is not repeated here."""

    path: str  # a Transaction field, or a path through its relations (license__name)
    csv: str = ""  # its header in the CSV export ("": not exported)
    api: str = ""  # its field in /manage/v1/transactions ("": not served)
    feed: str = ""  # its key in a live-feed event ("": not sent)
    detail: str | None = None  # the admin change page's section it shows in (None: not shown)


_MAIN, _OUTCOME, _CALLER, _REQUEST, _USAGE, _METADATA = (
    "",
    "Outcome",
    "Caller",
    "Request",
    "Usage and charge",
    "Metadata",
)
# Every reader takes these in this order: the CSV export (licensing.console.review.CSV_COLUMNS),
# the management API (licensing.console.manage_api.TransactionSerializer), the admin's change
# page (licensing.console.admin.transactions.TransactionAdmin.fieldsets) and the live feed
# (licensing.ledger.feed).
LEDGER_COLUMNS = (
    LedgerColumn("id", csv="id", api="id"),
    LedgerColumn("created_at", csv="created_at", api="created_at", feed="created_at", detail=_MAIN),
    LedgerColumn("request_id", csv="request_id", api="request_id", feed="request_id", detail=_MAIN),
    LedgerColumn("upstream_id", csv="answer_id", api="answer_id", feed="upstream_id", detail=_MAIN),
    LedgerColumn("license__institution__name", csv="institution", api="institution"),
    LedgerColumn("license", api="license", detail=_CALLER),
    LedgerColumn("license__name", csv="license", api="license_name", feed="license"),
    LedgerColumn("api_key", api="api_key", feed="api_key_id", detail=_CALLER),
    LedgerColumn("api_key__prefix", csv="api_key", api="api_key_prefix"),
    LedgerColumn("end_user", api="end_user", feed="end_user_id", detail=_CALLER),
    LedgerColumn("end_user__subject", csv="end_user", api="end_user_subject"),
    LedgerColumn("course", api="course", detail=_CALLER),
    LedgerColumn("course__code", csv="course", api="course_code"),
    LedgerColumn("wallet", detail=_CALLER),
    LedgerColumn("service", csv="service", api="service", feed="service", detail=_REQUEST),
    LedgerColumn(
        "requested_model",
        csv="requested_model",
        api="requested_model",
        feed="requested_model",
        detail=_REQUEST,
    ),
    LedgerColumn("billed_model", csv="billed_model", api="billed_model", detail=_REQUEST),
    LedgerColumn("provider", csv="provider", api="provider", feed="provider", detail=_REQUEST),
    LedgerColumn("connection", csv="connection", api="connection", detail=_REQUEST),
    LedgerColumn("attempts", csv="attempts", api="attempts", detail=_REQUEST),
    LedgerColumn("failovers", csv="failovers", api="failovers", detail=_REQUEST),
    LedgerColumn("status_code", csv="status", api="status", feed="status_code", detail=_MAIN),
    LedgerColumn("outcome", csv="outcome", api="outcome", feed="outcome", detail=_OUTCOME),
    LedgerColumn(
        "error_code", csv="error_code", api="error_code", feed="error_code", detail=_OUTCOME
    ),
    LedgerColumn(
        "error_message",
        csv="error_message",
        api="error_message",
        feed="error_message",
        detail=_OUTCOME,
    ),
    LedgerColumn("prompt_tokens", csv="prompt_tokens", api="prompt_tokens", detail=_USAGE),
    LedgerColumn(
        "completion_tokens", csv="completion_tokens", api="completion_tokens", detail=_USAGE
    ),
    LedgerColumn(
        "total_tokens", csv="total_tokens", api="total_tokens", feed="total_tokens", detail=_USAGE
    ),
    LedgerColumn("images", csv="images", api="images", feed="images", detail=_USAGE),
    LedgerColumn("megapixels", csv="megapixels", api="megapixels", detail=_USAGE),
    LedgerColumn("units", csv="units", api="units", detail=_USAGE),
    LedgerColumn("credits", csv="credits", api="credits", feed="credits", detail=_USAGE),
    # The credits as money at the institution's rate (licensing.rules.money), e.g. "0.25 EUR".
    LedgerColumn("cost", csv="cost", api="cost", detail=_USAGE),
    LedgerColumn("latency_ms", csv="latency_ms", api="latency_ms", feed="latency_ms", detail=_MAIN),
    LedgerColumn("metadata", csv="metadata", api="metadata", detail=_METADATA),
)
DETAIL_SECTIONS = (_MAIN, _OUTCOME, _CALLER, _REQUEST, _USAGE, _METADATA)


def detail_fieldsets() -> tuple:
    """The admin change page's fieldsets: each section's columns, in LEDGER_COLUMNS' order."""
    return tuple(
        (section or None, {"fields": tuple(c.path for c in LEDGER_COLUMNS if c.detail == section)})
        for section in DETAIL_SECTIONS
    )


FIELDS = [f for f in Transaction._meta.concrete_fields if not f.primary_key]
COLUMNS = [str(f.column) for f in FIELDS]  # every concrete field has one (typed Optional)


def row_values(entry: LedgerEntry, wallet_id: int | None) -> dict:
    outcome = entry.outcome or outcome_for(entry.status_code, entry.error_code)
    return {**entry.__dict__, "wallet_id": wallet_id, "outcome": outcome}

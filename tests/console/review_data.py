"""A small ledger for the review tests (tests/console/test_review.py,
tests/console/test_manage_transactions.py): two institutions from
tests.console.test_admin.make_licensing (three rows each, made now) plus rows that
differ in every field a reviewer filters on, and the filter cases with the rule each one
stands for, evaluated here in Python on the rows themselves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from licensing.access.credentials import api_key_create
from licensing.models import EndUser, License, Transaction

from .test_admin import make_licensing

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def _row(license, request_id, at, **fields) -> Transaction:
    values = {
        "service": "chat_completions",
        "requested_model": "gpt-4o",
        "billed_model": "gpt-4o",
        "provider": "direct",
        "connection": "default",
        "status_code": 200,
        "outcome": "success",
        **fields,
    }
    return Transaction.objects.create(
        request_id=request_id, license=license, created_at=at, **values
    )


def make_ledger() -> dict:
    from catalog.services import catalog_load_defaults

    catalog_load_defaults()  # the provider filter offers the catalog's providers
    a, b = make_licensing("a"), make_licensing("b")
    lic_a, lic_b = a["license"], b["license"]
    a2 = License.objects.create(
        name="license-a2", institution=a["institution"], license_type=lic_a.license_type
    )
    key_a2, _ = api_key_create(license=a2, name="key a2")
    formula_user = EndUser.objects.create(license=lic_a, issuer=a["issuer"], subject="=2+5")
    key_a, user_a, key_b = a["api_key"], a["end_user"], b["api_key"]
    rows = {
        "chat": _row(
            lic_a,
            "abc123" + "0" * 26,
            T0,
            api_key=key_a,
            upstream_id="chatcmpl-AAA111",
            credits=500,
            prompt_tokens=100,
            completion_tokens=20,
            total_tokens=120,
            metadata={"course": "CS101", "section": 3},
        ),
        "aggregator": _row(
            lic_a,
            "0f" + "1" * 30,
            T0 + timedelta(hours=1),
            api_key=key_a,
            requested_model="gpt-4o-mini",
            billed_model="gpt-4o-mini-2024-07-18",
            provider="aggregator",
            attempts=2,  # direct failed first: the request failed over
            failovers="direct/default: status_5xx",
            upstream_id="chatcmpl-AAB222",
            credits=70,
            total_tokens=30,
            metadata={"course": "CS102", "title": "Intro to AI"},
        ),
        "image": _row(
            lic_a,
            "1e" + "2" * 30,
            T0 + timedelta(days=1),
            api_key=key_a,
            service="image_generation",
            requested_model="gpt-image-1",
            billed_model="gpt-image-1",
            images=2,
            credits=80_000,
            metadata={"course": "=cmd|' /C calc'!A0", "who": "O'Brien"},
        ),
        "denied": _row(
            lic_a,
            "2d" + "3" * 30,
            T0 + timedelta(days=2),
            end_user=user_a,
            billed_model="",
            provider="",
            status_code=403,
            outcome="denied",
            error_code="policy_denied",
            error_message="'max_tokens' must be <= 500",
        ),
        "failure": _row(
            lic_a,
            "3c" + "4" * 30,
            T0 + timedelta(days=2, hours=3),
            end_user=formula_user,
            status_code=503,
            outcome="failure",
            error_code="provider_unavailable",
            error_message="Service temporarily unavailable",
        ),
        "client_error": _row(
            lic_a,
            "4b" + "5" * 30,
            T0 + timedelta(days=3),
            api_key=key_a,
            requested_model="-bad-model",
            billed_model="-bad-model",
            status_code=400,
            outcome="client_error",
            error_code="provider_rejected",
            error_message="+" + "x" * 60,
        ),
        "responses": _row(
            key_a2.license,
            "abc124" + "6" * 26,
            T0 + timedelta(days=1, hours=6),
            api_key=key_a2,
            service="responses",
            requested_model="gpt-4.1",
            billed_model="gpt-4.1",
            upstream_id="resp_abc123",
            credits=900,
            total_tokens=300,
            metadata={"course": "CS101", "graded": True, "n": 5},
        ),
        "b_chat": _row(
            lic_b,
            "abc125" + "7" * 26,
            T0 + timedelta(hours=1),
            api_key=key_b,
            upstream_id="chatcmpl-AAA999",
            credits=1234,
            total_tokens=77,
            metadata={"course": "CS101"},
        ),
        "b_denied": _row(
            lic_b,
            "5a" + "8" * 30,
            T0 + timedelta(days=1),
            api_key=key_b,
            status_code=402,
            outcome="denied",
            error_code="out_of_budget",
            error_message="Insufficient credits",
        ),
    }
    return {"a": a, "b": b, "a2": a2, "key_a2": key_a2, "formula_user": formula_user, **rows}


def all_rows() -> list[Transaction]:
    return list(Transaction.objects.select_related("license"))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# (id, query parameters made from the ledger, the rule in Python)
FILTER_CASES = [
    (
        "institution",
        lambda w: {"institution": w["a"]["institution"].pk},
        lambda t, w: t.license.institution_id == w["a"]["institution"].pk,
    ),
    ("license", lambda w: {"license": w["a2"].pk}, lambda t, w: t.license_id == w["a2"].pk),
    (
        "api_key",
        lambda w: {"api_key": w["a"]["api_key"].pk},
        lambda t, w: t.api_key_id == w["a"]["api_key"].pk,
    ),
    (
        "end_user",
        lambda w: {"end_user": w["a"]["end_user"].pk},
        lambda t, w: t.end_user_id == w["a"]["end_user"].pk,
    ),
    (
        "service",
        lambda w: {"service": "image_generation"},
        lambda t, w: t.service == "image_generation",
    ),
    (
        "model_requested",
        lambda w: {"model": "gpt-4o-mini"},
        lambda t, w: "gpt-4o-mini" in (t.requested_model, t.billed_model),
    ),
    (
        "model_billed",
        lambda w: {"model": "gpt-4o-mini-2024-07-18"},
        lambda t, w: "gpt-4o-mini-2024-07-18" in (t.requested_model, t.billed_model),
    ),
    ("provider", lambda w: {"provider": "aggregator"}, lambda t, w: t.provider == "aggregator"),
    ("outcome", lambda w: {"outcome": "denied"}, lambda t, w: t.outcome == "denied"),
    ("failed_over", lambda w: {"failed_over": "true"}, lambda t, w: t.attempts > 1),
    ("not_failed_over", lambda w: {"failed_over": "false"}, lambda t, w: t.attempts <= 1),
    ("status", lambda w: {"status": "403"}, lambda t, w: t.status_code == 403),
    (
        "since_date",
        lambda w: {"since": "2026-03-11"},
        lambda t, w: t.created_at >= at("2026-03-11T00:00+00:00"),
    ),
    (
        "until_with_offset",
        lambda w: {"until": "2026-03-11T14:00+02:00"},
        lambda t, w: t.created_at < at("2026-03-11T12:00+00:00"),
    ),
    (
        "range_utc",
        lambda w: {"since": "2026-03-10T13:00", "until": "2026-03-12T00:00:00Z"},
        lambda t, w: at("2026-03-10T13:00+00:00") <= t.created_at < at("2026-03-12T00:00+00:00"),
    ),
    (
        "combined",
        lambda w: {
            "institution": w["a"]["institution"].pk,
            "outcome": "success",
            "service": "chat_completions",
        },
        lambda t, w: (
            t.license.institution_id == w["a"]["institution"].pk
            and t.outcome == "success"
            and t.service == "chat_completions"
        ),
    ),
]

# (q, the rows it finds by name; "team=a": the three rows make_licensing made for A)
SEARCH_CASES = [
    ("abc12", {"chat", "responses", "b_chat"}),
    ("ABC12", {"chat", "responses", "b_chat"}),
    ("abc123", {"chat"}),
    ("chatcmpl-AA", {"chat", "aggregator", "b_chat"}),
    ("chatcmpl-AAA", {"chat", "b_chat"}),
    ("chatcmpl-aaa", set()),
    ("resp_", {"responses"}),
    ("resp%", set()),
    ("res?_", set()),
    ("[r]esp", set()),
    ("course=CS101", {"chat", "responses", "b_chat"}),
    ("CS101", {"chat", "responses", "b_chat"}),
    ("course=CS101 section=3", {"chat"}),
    ("section=3", {"chat"}),
    ("graded=true", {"responses"}),
    ("n=5", {"responses"}),
    ('title="Intro to AI"', {"aggregator"}),
    ('"Intro to AI"', {"aggregator"}),
    ("course=NOPE", set()),
    ("CS101 abc125", {"b_chat"}),
    ("who=O'Brien", {"image"}),
]


def named(ledger: dict, names) -> set[str]:
    return {ledger[name].request_id for name in names}


def totals_of(rows) -> dict:
    return {
        "rows": len(rows),
        "credits": sum(t.credits for t in rows),
        "tokens": sum(t.total_tokens or 0 for t in rows),
        "images": sum(t.images or 0 for t in rows),
    }

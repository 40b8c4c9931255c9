"""/manage/v1/transactions: the review filters (the same FilterSet as the admin), cursor
pagination newest first, the detail, the CSV export (`?format=csv`, streamed, the whole
filtered set), scoping for institution admins and reviewers (another institution's row is 404,
its id in a filter is 400), bad input (400, never a 500) and the OpenAPI document."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from licensing.console.review import CSV_COLUMNS
from tests.kit import fresh, rows_made_once

from .review_data import FILTER_CASES, SEARCH_CASES, all_rows, make_ledger, named, totals_of
from .test_manage_api import token_client, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

LIST = "/manage/v1/transactions"


@pytest.fixture(scope="module")
def _ledger(django_db_setup, django_db_blocker):
    with rows_made_once(django_db_blocker, make_ledger) as rows:
        yield rows


@pytest.fixture
def ledger(db, _ledger):
    """review_data's ledger, made once for the module (tests/kit.py)."""
    return fresh(_ledger)


@pytest.fixture
def superuser():
    return token_client(user_with(None, superuser=True))


def listed(client, params=None) -> list[dict]:
    response = client.get(LIST, {"page_size": 500, **(params or {})})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["next"] is None
    return body["results"]


def csv_lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response.streaming and response["Content-Type"] == "text/csv; charset=utf-8"
    reader = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
    assert reader.fieldnames == [header for header, _ in CSV_COLUMNS]
    return list(reader)


@pytest.mark.parametrize("case", FILTER_CASES, ids=[case[0] for case in FILTER_CASES])
def test_each_filter(ledger, superuser, case):
    _, params, rule = case
    expected = {t.request_id for t in all_rows() if rule(t, ledger)}
    assert {row["request_id"] for row in listed(superuser, params(ledger))} == expected
    lines = csv_lines(superuser.get(LIST, {**params(ledger), "format": "csv"}))
    assert {line["request_id"] for line in lines} == expected


@pytest.mark.parametrize("q,names", SEARCH_CASES, ids=[case[0] for case in SEARCH_CASES])
def test_search(ledger, superuser, q, names):
    assert {row["request_id"] for row in listed(superuser, {"q": q})} == named(ledger, names)


def test_a_row_in_full(ledger, superuser):
    row = ledger["denied"]
    body = superuser.get(f"{LIST}/{row.pk}").json()
    assert body == {
        "id": row.pk,
        "created_at": "2026-03-12T12:00:00Z",
        "request_id": row.request_id,
        "answer_id": "",
        "institution": "Institution a",
        "license": ledger["a"]["license"].pk,
        "license_name": "license-a",
        "api_key": None,
        "api_key_prefix": None,
        "end_user": ledger["a"]["end_user"].pk,
        "end_user_subject": "user-a",
        "course": None,
        "course_code": None,
        "service": "chat_completions",
        "requested_model": "gpt-4o",
        "billed_model": "",
        "provider": "",
        "connection": "default",
        "attempts": 1,
        "failovers": "",
        "status": 403,
        "outcome": "denied",
        "error_code": "policy_denied",
        "error_message": "'max_tokens' must be <= 500",
        "prompt_tokens": None,
        "completion_tokens": None,
        "total_tokens": None,
        "images": None,
        "megapixels": None,
        "units": None,
        "credits": 0,
        "cost": "0.00 USD",
        "latency_ms": 0,
        "metadata": {},
    }
    chat = superuser.get(f"{LIST}/{ledger['chat'].pk}").json()
    assert chat["answer_id"] == "chatcmpl-AAA111"
    assert chat["api_key_prefix"] == ledger["a"]["api_key"].prefix
    assert chat["metadata"] == {"course": "CS101", "section": 3}
    one = csv_lines(superuser.get(f"{LIST}/{row.pk}", {"format": "csv"}))
    assert [line["request_id"] for line in one] == [row.request_id]


def test_a_failed_over_row(ledger, superuser):
    row = ledger["aggregator"]
    body = superuser.get(f"{LIST}/{row.pk}").json()
    assert (body["provider"], body["connection"], body["attempts"]) == ("aggregator", "default", 2)
    assert body["failovers"] == "direct/default: status_5xx"
    assert [r["request_id"] for r in listed(superuser, {"failed_over": "true"})] == [row.request_id]
    assert superuser.get(LIST, {"failed_over": "maybe"}).status_code == 200  # ignored


def test_cursor_pagination_newest_first(ledger, superuser):
    seen, url, params = [], LIST, {"page_size": 2}
    while url:
        body = superuser.get(url, params).json()
        assert len(body["results"]) <= 2
        seen += body["results"]
        url, params = body["next"], None
    rows = sorted(all_rows(), key=lambda t: (t.created_at, t.id), reverse=True)
    assert [row["id"] for row in seen] == [t.pk for t in rows]
    assert len(superuser.get(LIST, {"page_size": 10_000}).json()["results"]) == len(rows)
    assert superuser.get(LIST, {"cursor": "garbage"}).status_code == 404


def test_csv_is_the_whole_filtered_set_not_a_page(ledger, superuser):
    lines = csv_lines(superuser.get(LIST, {"format": "csv", "page_size": 1}))
    rows = sorted(all_rows(), key=lambda t: (t.created_at, t.id), reverse=True)
    assert [line["request_id"] for line in lines] == [t.request_id for t in rows]
    assert sum(int(line["credits"]) for line in lines) == totals_of(rows)["credits"]
    accepted = superuser.get(LIST, headers={"Accept": "text/csv"})
    assert len(csv_lines(accepted)) == len(rows)
    lines_by_id = {line["request_id"]: line for line in lines}
    assert lines_by_id[ledger["client_error"].request_id]["requested_model"] == "'-bad-model"
    assert lines_by_id[ledger["failure"].request_id]["end_user"] == "'=2+5"


def test_csv_pages_every_row_once_across_equal_times(ledger):
    """The export reads pages of rows after the last one read (keyset, not a server-side
    cursor, which a PgBouncer in transaction mode breaks): with pages of 2 and three rows at
    one instant, every row is written once, newest first, ties by id."""
    from django.db.models import Count

    from licensing.console.review import csv_chunks
    from licensing.models import Transaction

    tied = Transaction.objects.values("created_at").annotate(n=Count("id")).filter(n__gt=1)
    assert tied.exists(), "the sample ledger has rows at one instant (make_licensing's)"
    chunks = list(csv_chunks(Transaction.objects.all(), chunk_rows=2))
    lines = list(csv.DictReader(io.StringIO("".join(chunks))))
    rows = sorted(all_rows(), key=lambda t: (t.created_at, t.id), reverse=True)
    assert [line["request_id"] for line in lines] == [t.request_id for t in rows]
    assert all(chunk.count("\n") <= 2 for chunk in chunks[1:])  # pages of 2 lines


@pytest.mark.parametrize("role", ["admin", "reviewer"])
def test_scoped_to_the_own_institution(ledger, role):
    a, b = ledger["a"], ledger["b"]
    client = token_client(user_with(role, a["institution"]))
    own = {t.request_id for t in all_rows() if t.license.institution_id == a["institution"].pk}
    assert {row["request_id"] for row in listed(client)} == own
    assert {
        row["request_id"] for row in listed(client, {"institution": a["institution"].pk})
    } == own
    assert {line["request_id"] for line in csv_lines(client.get(LIST, {"format": "csv"}))} == own
    assert client.get(f"{LIST}/{ledger['b_chat'].pk}").status_code == 404
    assert client.get(f"{LIST}/{ledger['b_chat'].pk}", {"format": "csv"}).status_code == 404
    assert client.get(f"{LIST}/{ledger['chat'].pk}").status_code == 200
    for name, value in (
        ("institution", b["institution"].pk),
        ("license", b["license"].pk),
        ("api_key", b["api_key"].pk),
        ("end_user", b["end_user"].pk),
    ):
        for extra in ({}, {"format": "csv"}):
            refused = client.get(LIST, {name: value, **extra})
            assert refused.status_code == 400, (name, extra)
            assert refused["Content-Type"] == "application/json"
            assert "Select a valid choice" in refused.json()[name][0]
    assert listed(client, {"q": "abc125"}) == []


def test_who_may_read_the_ledger(ledger):
    assert Client().get(LIST).status_code == 401
    assert Client().get(LIST, {"format": "csv"}).status_code == 401
    plain = token_client(user_with(None))
    assert plain.get(LIST).status_code == 403
    assert plain.get(LIST, {"format": "csv"}).status_code == 403
    reviewer = token_client(user_with("reviewer", ledger["a"]["institution"]))
    assert reviewer.post(LIST, {}).status_code == 405
    assert reviewer.delete(f"{LIST}/{ledger['chat'].pk}").status_code == 405


BAD = [
    {"since": "2026-13-45"},
    {"until": "tomorrow"},
    {"since": "2026-03-12", "until": "2026-03-12"},
    {"since": "\x00"},
    {"license": "abc"},
    {"license": "99999999999999999999999"},
    {"api_key": "1.0"},
    {"end_user": "1\x00"},
    {"status": "2OO"},
    {"status": "700"},
    {"service": "bogus"},
    {"provider": "bogus"},
    {"outcome": "bogus"},
    {"model": "a\x00"},
    {"q": "a\x00"},
    {"q": '"open'},
    {"q": "x" * 501},
]


@pytest.mark.parametrize("params", BAD, ids=lambda p: repr(p)[:40])
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_bad_input_is_400_json(ledger, superuser, params, fmt):
    response = superuser.get(LIST, {**params, "format": fmt})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) <= {*params, "non_field_errors", "__all__"}


def test_detail_of_a_bad_id_is_404(ledger, superuser):
    for bad in ("abc", "99999999999999999999999", "1%00"):
        assert superuser.get(f"{LIST}/{bad}").status_code == 404


def test_openapi_documents_the_ledger(ledger):
    paths = Client().get("/manage/v1/openapi.json").json()["paths"]
    listing = paths["/manage/v1/transactions"]["get"]
    assert "/manage/v1/transactions/{id}" in paths
    names = {p["name"] for p in listing["parameters"]}
    assert {"institution", "license", "api_key", "end_user", "service", "model"} <= names
    assert {"provider", "outcome", "status", "since", "until", "q", "format", "cursor"} <= names
    assert "page_size" in names
    content = listing["responses"]["200"]["content"]
    assert content["text/csv"]["schema"] == {"type": "string"}
    assert content["application/json"]["schema"]["$ref"].endswith("PaginatedTransactionList")

"""The usage report (licensing.console.usage_report) against sums computed here in Python from the
rows the test made (several days, services, models, licenses, keys, end users and institutions,
refusals and failures included), its scoping and range rules, and its query count; and the SVG
charts (licensing.console.charts): well-formed XML, one bar per day and series, escaped labels,
deterministic output."""

from __future__ import annotations

import itertools
import random
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from licensing.access.credentials import api_key_create
from licensing.access.scoping import Scope, scoped
from licensing.access.services import license_create
from licensing.console import charts
from licensing.console.usage_report import (
    OTHER_MODELS,
    OUTCOMES,
    RangeError,
    resolve_range,
    usage_report,
)
from licensing.models import EndUser, Institution, JwtIssuer, Transaction

pytestmark = pytest.mark.both_databases

SINCE, UNTIL = date(2025, 1, 10), date(2025, 1, 20)
MODELS = {
    "embeddings": ["text-embedding-3-small", "text-embedding-3-large"],
    "chat_completions": ["gpt-4o-mini", "o4-mini", "gpt-4o"],
    "image_generation": ["gpt-image-1"],
}
SVG = "{http://www.w3.org/2000/svg}"


def make_holders(suffix: str, licenses: int = 2) -> list[tuple]:
    """(license, api key, end user) triples of one institution: key rows and JWT rows."""
    holders = []
    for n in range(licenses):
        lic = license_create(name=f"usage-{suffix}{n}", institution=f"Usage school {suffix}")
        issuer = JwtIssuer.objects.create(
            institution=lic.institution,
            license=lic,
            issuer=f"https://idp-{suffix}{n}.example",
            audience="gateway",
            algorithms=["HS256"],
            hs256_secret="s" * 32,
        )
        for k in range(2):
            key, _ = api_key_create(license=lic, name=f"key {suffix}{n}{k}" if k else "")
            holders.append((lic, key, None))
            user = EndUser.objects.create(license=lic, issuer=issuer, subject=f"u-{suffix}{n}{k}")
            holders.append((lic, None, user))
    return holders


def ledger_row(n: int, when: datetime, holder: tuple, rng: random.Random) -> Transaction:
    lic, key, user = holder
    service = rng.choice(sorted(MODELS))
    model = rng.choice(MODELS[service])
    roll = rng.random()
    fields = {"status_code": 200, "outcome": "success", "credits": rng.randrange(1, 5000)}
    billed, provider = model, "direct"
    if roll < 0.15:  # a refusal: nothing billed, no provider
        fields = {"status_code": 403, "outcome": "denied", "credits": 0}
        fields["error_code"], billed, provider = "policy_denied", "", ""
    elif roll < 0.25:
        fields = {"status_code": 502, "outcome": "failure", "credits": rng.choice([0, 9])}
    elif roll < 0.32:
        fields = {"status_code": 400, "outcome": "client_error", "credits": 0}
    elif model == "gpt-4o-mini" and roll > 0.9:
        billed = "gpt-4o-mini-2024-07-18"  # an alias: the billed model counts
    return Transaction(
        created_at=when,
        request_id=f"usage-{n:05d}",
        license=lic,
        api_key=key,
        end_user=user,
        service=service,
        requested_model=model,
        billed_model=billed,
        provider=provider,
        connection="default" if provider else "",
        **fields,
    )


def make_ledger(holders: list[tuple], count: int = 300, seed: int = 7) -> list[Transaction]:
    """Rows from two days before SINCE to two days after UNTIL, some days left empty, and rows
    exactly on the range's edges."""
    rng = random.Random(seed)
    start = datetime.combine(SINCE, datetime.min.time(), tzinfo=UTC)
    rows, n = [], 0
    for n in range(count):
        offset = rng.randrange(-2, (UNTIL - SINCE).days + 2)
        if offset in (3, 7):  # days without traffic
            offset = 4
        when = start + timedelta(days=offset, seconds=rng.randrange(86400))
        rows.append(ledger_row(n, when, rng.choice(holders), rng))
    edge = [start, start - timedelta(microseconds=1), start + timedelta(days=10)]
    for i, when in enumerate(edge):
        rows.append(ledger_row(count + i, when, holders[0], rng))
    Transaction.objects.bulk_create(rows)
    return rows


@pytest.fixture
def world(db):
    a, b = make_holders("a"), make_holders("b", licenses=1)
    rows = make_ledger(a + b)
    return {"a": a, "b": b, "rows": rows, "institution_a": a[0][0].institution}


# --- the numbers, computed independently -------------------------------------------------------


def in_range(rows, since=SINCE, until=UNTIL, institution=None):
    return [
        r
        for r in rows
        if since <= r.created_at.astimezone(UTC).date() < until
        and (institution is None or r.license.institution_id == institution.pk)
    ]


def per_day(rows, key) -> dict:
    """{name: {day: [credits, requests]}}"""
    sums = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        cell = sums[key(r)][r.created_at.astimezone(UTC).date()]
        cell[0] += r.credits
        cell[1] += 1
    return sums


def as_series(sums: dict, days: list[date]) -> tuple[list[int], list[int]]:
    return [sums.get(d, [0, 0])[0] for d in days], [sums.get(d, [0, 0])[1] for d in days]


def top(rows, attr, label):
    sums = defaultdict(lambda: [0, 0])
    for r in rows:
        obj = getattr(r, attr)
        if obj is not None:
            sums[obj.pk][0] += r.credits
            sums[obj.pk][1] += 1
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))[:10]
    objects = {getattr(r, attr).pk: getattr(r, attr) for r in rows if getattr(r, attr)}
    return [(pk, label(objects[pk]), c, n) for pk, (c, n) in ranked]


def model_of(row) -> str:
    return row.billed_model or row.requested_model


def check_report(report, rows, top_models):
    days = [SINCE + timedelta(days=i) for i in range((UNTIL - SINCE).days)]
    assert report.days == days
    total = per_day(rows, lambda r: "total")["total"]
    assert (report.total.credits, report.total.requests) == as_series(total, days)
    services = per_day(rows, lambda r: r.service)
    assert {s.name: (s.credits, s.requests) for s in report.by_service} == {
        name: as_series(sums, days) for name, sums in services.items()
    }
    credits_of = [s.total_credits for s in report.by_service]
    assert credits_of == sorted(credits_of, reverse=True)
    outcomes = per_day(rows, lambda r: r.outcome)
    assert [s.name for s in report.by_outcome] == list(OUTCOMES)
    for s in report.by_outcome:
        assert (s.credits, s.requests) == as_series(outcomes.get(s.name, {}), days)
    check_models(report, rows, days, top_models)
    assert [(r.id, r.label, r.credits, r.requests) for r in report.top_licenses] == top(
        rows, "license", lambda lic: lic.name
    )
    assert [(r.id, r.label, r.credits, r.requests) for r in report.top_api_keys] == top(
        rows, "api_key", lambda k: f"{k.prefix}…" + (f" ({k.name})" if k.name else "")
    )
    assert [(r.id, r.label, r.credits, r.requests) for r in report.top_end_users] == top(
        rows, "end_user", lambda u: u.subject
    )


def check_models(report, rows, days, top_models):
    models = per_day(rows, model_of)
    ranked = sorted(
        models,
        key=lambda m: (-sum(c for c, _ in models[m].values()), -len(_of(rows, m)), m),
    )
    kept, rest = ranked[:top_models], ranked[top_models:]
    assert [s.name for s in report.by_model if not s.other] == kept
    for s in report.by_model[: len(kept)]:
        assert (s.credits, s.requests) == as_series(models[s.name], days)
    other = per_day([r for r in rows if model_of(r) in rest], lambda r: "other")["other"]
    if rest:
        assert report.by_model[-1].other and report.by_model[-1].name == OTHER_MODELS
        assert (report.by_model[-1].credits, report.by_model[-1].requests) == as_series(other, days)
    else:
        assert not any(s.other for s in report.by_model)


def _of(rows, model):
    return [r for r in rows if model_of(r) == model]


# --- the report --------------------------------------------------------------------------------


def test_report_matches_sums_computed_in_python(world):
    rows = in_range(world["rows"])
    assert any(r.outcome == "denied" for r in rows) and any(r.credits == 0 for r in rows)
    everything = scoped(Transaction.objects.all(), Scope(superuser=True))
    for top_models in (3, 8):
        report = usage_report(everything, SINCE, UNTIL, top_models=top_models)
        check_report(report, rows, top_models)
    assert report.total.total_requests == len(rows)
    assert report.total.total_credits == sum(r.credits for r in rows)


def test_refusals_count_as_requests_and_show_in_their_status_class(world):
    report = usage_report(Transaction.objects.all(), SINCE, UNTIL)
    denied = next(s for s in report.by_outcome if s.name == "denied")
    refused = [r for r in in_range(world["rows"]) if r.outcome == "denied"]
    assert denied.total_requests == len(refused) > 0 and denied.total_credits == 0
    assert sum(s.total_requests for s in report.by_outcome) == report.total.total_requests


def test_days_without_traffic_are_zeros_and_edges_are_exact(world):
    report = usage_report(Transaction.objects.all(), SINCE, UNTIL)
    for empty in (SINCE + timedelta(days=3), SINCE + timedelta(days=7)):
        i = report.days.index(empty)
        assert report.total.credits[i] == 0 and report.total.requests[i] == 0
        assert all(s.requests[i] == 0 for s in report.by_service)
    # A row at SINCE 00:00:00 counts; one a microsecond before and one at UNTIL do not.
    edges = Transaction.objects.filter(request_id__in=["usage-00300", "usage-00301", "usage-00302"])
    first = usage_report(edges, SINCE, UNTIL)
    assert first.total.requests == [1] + [0] * 9


def test_scoped_to_an_institution(world):
    institution = world["institution_a"]
    staff = Scope(superuser=False, institution_id=institution.pk, role="reviewer")
    rows = in_range(world["rows"], institution=institution)
    assert 0 < len(rows) < len(in_range(world["rows"]))
    by_scope = usage_report(scoped(Transaction.objects.all(), staff), SINCE, UNTIL)
    check_report(by_scope, rows, 8)
    everything = Transaction.objects.all()
    by_choice = usage_report(everything, SINCE, UNTIL, institution_id=institution.pk)
    assert by_choice == by_scope
    other = Institution.objects.exclude(pk=institution.pk).get(name__startswith="Usage")
    assert (
        usage_report(
            scoped(Transaction.objects.all(), staff), SINCE, UNTIL, institution_id=other.pk
        ).total.requests
        == [0] * 10
    )
    nobody = usage_report(scoped(everything, Scope(superuser=False)), SINCE, UNTIL)
    assert nobody.total.total_requests == 0 and nobody.top_licenses == []


def test_one_license(world):
    lic = world["a"][0][0]
    rows = [r for r in in_range(world["rows"]) if r.license_id == lic.pk]
    report = usage_report(Transaction.objects.all(), SINCE, UNTIL, license_id=lic.pk)
    check_report(report, rows, 8)
    assert [r.id for r in report.top_licenses] == [lic.pk]


def report_queries(since=SINCE, until=UNTIL) -> int:
    with CaptureQueriesContext(connection) as ctx:
        usage_report(Transaction.objects.all(), since, until)
    return len(ctx.captured_queries)


def test_a_bounded_number_of_queries_whatever_the_rows(db):
    holders = make_holders("q")
    make_ledger(holders, count=20, seed=1)
    few = report_queries()
    Transaction.objects.all().delete()
    make_ledger(holders + make_holders("r"), count=600, seed=2)
    assert report_queries() == few == 7  # four GROUP BYs, three name lookups
    assert report_queries(date(2024, 1, 1), date(2024, 12, 31)) == 3  # nothing to name


def test_an_empty_range(db):
    report = usage_report(Transaction.objects.all(), SINCE, UNTIL)
    assert report.total.requests == [0] * 10 and report.by_service == [] and report.by_model == []
    assert [s.name for s in report.by_outcome] == list(OUTCOMES)
    assert report.as_dict()["totals"] == {
        "credits": 0,
        "requests": 0,
        "requests_by_outcome": dict.fromkeys(OUTCOMES, 0),
    }


# --- the range ---------------------------------------------------------------------------------

TODAY = date(2026, 3, 15)


def test_range_defaults_to_the_last_30_days():
    assert resolve_range(None, None, TODAY) == (date(2026, 2, 14), date(2026, 3, 16))
    assert resolve_range(date(2026, 3, 1), None, TODAY) == (date(2026, 3, 1), date(2026, 3, 16))
    assert resolve_range(None, date(2026, 2, 1), TODAY) == (date(2026, 1, 2), date(2026, 2, 1))
    # A start in the future: one day from it.
    assert resolve_range(date(2026, 4, 1), None, TODAY) == (date(2026, 4, 1), date(2026, 4, 2))
    assert resolve_range(date(2025, 3, 15), date(2026, 3, 16), TODAY)[0] == date(2025, 3, 15)


@pytest.mark.parametrize(
    "since, until, field, message",
    [
        (date(2026, 3, 2), date(2026, 3, 1), "until", "must be after"),
        (date(2026, 3, 1), date(2026, 3, 1), "until", "must be after"),
        (date(2025, 3, 14), date(2026, 3, 16), "until", "at most 366 days"),
        (date(2020, 1, 1), None, "until", "at most 366 days"),
        (date(1969, 12, 31), None, "since", "1970-01-01"),
        (None, date(1, 1, 1), "until", "1970-01-01"),
        (date.max, None, "since", "out of range"),
    ],
)
def test_range_errors(since, until, field, message):
    with pytest.raises(RangeError) as caught:
        resolve_range(since, until, TODAY)
    assert caught.value.field == field and message in caught.value.message


# --- the charts --------------------------------------------------------------------------------

DAYS = [date(2026, 3, 1) + timedelta(days=i) for i in range(14)]


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def bars(root) -> list[ET.Element]:
    """The bars, each with the `series` of its group and the `day` its tooltip starts with."""
    found = []
    for group in root.iter(f"{SVG}g"):
        if group.get("class") == "bars":
            for rect in group.iter(f"{SVG}rect"):
                rect.set("series", group.get("data-series"))
                rect.set("day", rect.find(f"{SVG}title").text.split(" ")[0])
                found.append(rect)
    return found


def test_stacked_bars_one_bar_per_day_and_series():
    bands = [
        charts.Band("embeddings", [i * 1000 for i in range(14)], charts.PALETTE[0]),
        charts.Band("chat_completions", [0, 5, 0, 7] + [12_345] * 10, charts.PALETTE[1]),
        charts.Band("empty", [0] * 14, charts.PALETTE[2]),
    ]
    root = parse(charts.stacked_bars(DAYS, bands, title="Credits", unit="micro-credits"))
    found = {(b.get("day"), b.get("series")) for b in bars(root)}
    expected = {
        (day.isoformat(), band.label)
        for band in bands
        for day, value in zip(DAYS, band.values, strict=True)
        if value > 0
    }
    assert found == expected and len(bars(root)) == len(expected)
    tips = [b.find(f"{SVG}title").text for b in bars(root)]
    assert "2026-03-14 · chat_completions: 12,345 micro-credits" in tips
    # Bars of a day stack: the top one starts where the one below ends.
    last = [b for b in bars(root) if b.get("day") == "2026-03-14"]
    below, above = last
    assert float(above.get("y")) + float(above.get("height")) == pytest.approx(
        float(below.get("y")), abs=0.11
    )
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "20,000" in texts and "Mar 1" in texts  # tick labels with thousands separators
    assert {"embeddings", "chat_completions", "empty"} <= set(texts)  # the legend


def test_bar_heights_follow_the_values():
    bands = [charts.Band("s", [100, 50, 25], charts.PALETTE[0])]
    heights = [
        float(b.get("height"))
        for b in bars(parse(charts.stacked_bars(DAYS[:3], bands, title="t", unit="u")))
    ]
    assert heights[0] == pytest.approx(2 * heights[1], rel=0.01)
    assert heights[1] == pytest.approx(2 * heights[2], rel=0.02)


def test_labels_are_escaped_and_stay_text():
    evil = '<script>alert("x")</script>&\x00'
    svg = charts.stacked_bars(
        DAYS[:2], [charts.Band(evil, [1, 2], charts.PALETTE[0])], title=evil, unit="u"
    )
    top = charts.hbars(
        [charts.HBar(evil, 5, href='/x?a=1&b="><script>', note=evil)], title=evil, unit="u"
    )
    for output in (svg, top):
        assert "<script" not in output and "&lt;script&gt;" in output
        root = parse(output)
        assert not [e for e in root.iter() if e.tag.endswith("script")]
        assert any(t.text and t.text.startswith("<script>") for t in root.iter(f"{SVG}text"))
    link = parse(top).find(f".//{SVG}a")
    assert link.get("href") == '/x?a=1&b="><script>'


def test_charts_are_deterministic_and_handle_empty_input():
    bands = [charts.Band(f"model-{i}", [i * 7 % 5] * 14, c) for i, c in enumerate(charts.PALETTE)]
    first = charts.stacked_bars(DAYS, bands, title="t", unit="u")
    assert first == charts.stacked_bars(DAYS, bands, title="t", unit="u")
    empty = parse(charts.stacked_bars(DAYS, [], title="t", unit="u"))
    assert bars(empty) == []
    assert "No usage in this range" in [t.text for t in empty.iter(f"{SVG}text")]
    nothing = parse(charts.hbars([], title="t", unit="u"))
    assert "Nothing in this range" in [t.text for t in nothing.iter(f"{SVG}text")]


def test_legend_wraps_inside_the_chart():
    bands = [charts.Band("a-rather-long-model-name-" + str(i), [1] * 3, "#000") for i in range(9)]
    root = parse(charts.stacked_bars(DAYS[:3], bands, title="t", unit="u", width=640))
    items = [g for g in root.iter(f"{SVG}g") if g.get("class") == "legend-item"]
    assert len(items) == 9
    assert len({float(g.find(f"{SVG}rect").get("y")) for g in items}) > 1  # more than a line
    for g in items:
        text = g.find(f"{SVG}text")
        assert float(text.get("x")) + len(text.text) * charts.CHAR_W <= 640


def test_a_year_of_days_keeps_readable_axis_labels():
    year = [date(2025, 1, 1) + timedelta(days=i) for i in range(366)]
    root = parse(
        charts.stacked_bars(year, [charts.Band("s", [1] * 366, "#000")], title="t", unit="u")
    )
    assert len(bars(root)) == 366
    labels = [t for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle"]
    xs = [float(t.get("x")) for t in labels]
    assert 4 <= len(labels) <= 12
    assert min(b - a for a, b in itertools.pairwise(xs)) >= 6 * charts.CHAR_W


def test_hbars_longest_first_with_values_and_links():
    rows = [charts.HBar("license-a", 9000, "/a"), charts.HBar("b", 3000, None)]
    root = parse(charts.hbars(rows, title="Top", unit="micro-credits"))
    rects = list(root.iter(f"{SVG}rect"))
    assert float(rects[0].get("width")) == pytest.approx(3 * float(rects[1].get("width")), 0.01)
    assert [a.get("href") for a in root.iter(f"{SVG}a")] == ["/a"]
    assert {"9,000", "3,000"} <= {t.text for t in root.iter(f"{SVG}text")}
    # Links inside: a named group, not an image (an image's links cannot be reached).
    assert (root.get("role"), root.get("aria-label")) == ("group", "Top")
    plain = parse(charts.hbars([charts.HBar("b", 3000, None)], title="Top", unit="u"))
    assert plain.get("role") == "img"


def test_nice_ticks():
    assert charts.nice_ticks(0) == [0, 1]
    assert charts.nice_ticks(3) == [0, 1, 2, 3]
    assert charts.nice_ticks(12_345) == [0, 5000, 10_000, 15_000]
    assert charts.nice_ticks(1_000_000) == [0, 250_000, 500_000, 750_000, 1_000_000]
    for maximum in (1, 7, 99, 101, 2_500_001, 10**12 + 3):
        ticks = charts.nice_ticks(maximum)
        assert ticks[0] == 0 and ticks[-1] >= maximum and len(ticks) <= 6

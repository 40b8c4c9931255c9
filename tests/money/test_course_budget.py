"""A course member pays at three levels: the student's course allowance, the course pool and the
license's budget. Every level must have budget left before the provider call; the charge lands
on every level with the ledger row; periods follow the institution's time zone (DST days are 23
or 25 hours); a top-up counts in its one period; `credits_remaining` is the smallest level."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from django.db.models import Sum

from core import pgpool
from core.errors import OUT_OF_BUDGET
from core.localcache import clear_all
from licensing.ledger.actions import transaction_record, transaction_record_once
from licensing.ledger.budget import (
    budget_check,
    course_budget,
    course_levels,
    course_window_start,
)
from licensing.ledger.spool import _decode, _encode, spool_depth
from licensing.models import ApiKey, Course, CourseMember, EndUser, Transaction, Wallet
from tests.ledger_helpers import entry_for

SMALL = "text-embedding-3-small"
BODY = {"model": SMALL, "input": "a few words to embed", "encoding_format": "float"}


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- periods in the institution's time zone (no database) -------------------------------------


@pytest.mark.parametrize(
    ("period", "now", "start"),
    [
        # Berlin is UTC+1 in winter, UTC+2 in summer.
        ("day", utc(2026, 1, 15, 22, 59), utc(2026, 1, 14, 23)),
        ("day", utc(2026, 1, 15, 23, 0), utc(2026, 1, 15, 23)),  # local midnight: a new day
        # 29 March 2026: clocks go 02:00 -> 03:00, the day is 23 hours long.
        ("day", utc(2026, 3, 29, 21, 59), utc(2026, 3, 28, 23)),
        ("day", utc(2026, 3, 29, 22, 0), utc(2026, 3, 29, 22)),
        # 25 October 2026: clocks go 03:00 -> 02:00, the day is 25 hours long.
        ("day", utc(2026, 10, 25, 22, 59), utc(2026, 10, 24, 22)),
        ("day", utc(2026, 10, 25, 23, 0), utc(2026, 10, 25, 23)),
        # Weeks start on Monday's local midnight: Monday 30 March 2026 (summer time).
        ("week", utc(2026, 3, 29, 21, 59), utc(2026, 3, 22, 23)),
        ("week", utc(2026, 3, 29, 22, 0), utc(2026, 3, 29, 22)),
        # Months on the 1st: 1 November 2026 (winter time again).
        ("month", utc(2026, 10, 31, 22, 59), utc(2026, 9, 30, 22)),
        ("month", utc(2026, 10, 31, 23, 0), utc(2026, 10, 31, 23)),
    ],
)
def test_periods_start_at_local_midnight_monday_and_the_first(period, now, start):
    assert course_window_start(period, now, "Europe/Berlin") == start


def test_dst_days_are_23_and_25_hours_long():
    spring = course_window_start("day", utc(2026, 3, 29, 12), "Europe/Berlin")
    after_spring = course_window_start("day", utc(2026, 3, 30, 12), "Europe/Berlin")
    autumn = course_window_start("day", utc(2026, 10, 25, 12), "Europe/Berlin")
    after_autumn = course_window_start("day", utc(2026, 10, 26, 12), "Europe/Berlin")
    assert (after_spring - spring).total_seconds() == 23 * 3600
    assert (after_autumn - autumn).total_seconds() == 25 * 3600


def test_a_midnight_that_does_not_exist_starts_the_day_at_its_first_instant():
    # Santiago springs forward at 00:00 (to 01:00): on 6 September 2026 the day starts at 01:00
    # local, 04:00 UTC.
    start = course_window_start("day", utc(2026, 9, 6, 15), "America/Santiago")
    assert start == utc(2026, 9, 6, 4)


def test_an_unknown_zone_is_a_configuration_error():
    from core.errors import BudgetConfigurationError

    with pytest.raises(BudgetConfigurationError):
        course_window_start("day", utc(2026, 1, 1), "Mars/Olympus")
    with pytest.raises(BudgetConfigurationError):
        course_window_start("year", utc(2026, 1, 1), "UTC")


# --- the course and its member --------------------------------------------------------------


def make_course(license, *, allowance=None, pool=None, period="day", tz="UTC", code="CS101"):
    institution = license.institution
    institution.timezone = tz
    institution.save()
    return Course.objects.create(
        institution=institution,
        license=license,
        name="Programming",
        code=code,
        allowance=allowance,
        allowance_period=period,
        pool_limit=pool,
    )


def member_key(make_key, course, subject="student-1", **member):
    end_user = EndUser.objects.create(license=course.license, subject=subject)
    CourseMember.objects.create(course=course, end_user=end_user, **member)
    key = make_key(course.license, end_user=end_user)
    ApiKey.objects.filter(end_user=end_user).update(course=course)
    clear_all()
    return key, end_user


def wallets(license) -> dict[str, int]:
    return dict(Wallet.objects.filter(license=license).values_list("holder", "spent"))


def ledger_sum(**filters) -> int:
    return Transaction.objects.filter(**filters).aggregate(s=Sum("credits"))["s"] or 0


# --- through the gateway ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowance", "pool", "license_limit", "exhausted"),
    [
        (3, 10, 10, "allowance"),
        (10, 3, 10, "pool"),
        (10, 10, 3, "license"),
    ],
)
def test_each_level_refuses_once_spent_and_every_level_is_charged(
    catalog, client, make_license, make_key, allowance, pool, license_limit, exhausted
):
    license = make_license(name="school", limit=license_limit, period="daily", strategy="per_user")
    course = make_course(license, allowance=allowance, pool=pool)
    key, end_user = member_key(make_key, course)
    headers = {"Authorization": f"Bearer {key}"}
    calls_before = len(catalog["direct"].requests)
    answers = [client.post("/v1/embeddings", headers=headers, json=BODY) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 400], exhausted
    assert spool_depth() == 0  # written by the store's statement, not replayed from the spool
    assert answers[3].json()["error"]["message"] == OUT_OF_BUDGET
    assert len(catalog["direct"].requests) - calls_before == 3  # no call for the refusal
    # credits_remaining: the smallest level, 3 - 1, 3 - 2, 3 - 3
    assert [a.json()["usage"]["credits_remaining"] for a in answers[:3]] == [2, 1, 0]
    rows = Transaction.objects.filter(license=license)
    assert set(rows.values_list("course_id", flat=True)) == {course.id}
    assert rows.get(error_code="out_of_budget").credits == 0
    assert wallets(license) == {
        f"user:{end_user.id}": 3,
        f"course:{course.id}:user:{end_user.id}": 3,
        f"course:{course.id}": 3,
    }
    assert ledger_sum(license=license, course=course) == 3


def test_unlimited_everywhere_answers_null_and_still_keeps_the_wallets(
    catalog, client, make_license, make_key
):
    license = make_license(name="open")
    course = make_course(license)
    key, end_user = member_key(make_key, course)
    answer = client.post("/v1/embeddings", headers={"Authorization": f"Bearer {key}"}, json=BODY)
    assert answer.status_code == 200
    assert answer.json()["usage"]["credits_remaining"] is None
    # No pool: the license's and the student's allowance wallet only.
    assert wallets(license) == {"license": 1, f"course:{course.id}:user:{end_user.id}": 1}


def test_a_plain_license_request_is_unchanged(catalog, client, make_license, make_key):
    license = make_license(name="plain", limit=5)
    make_course(license, allowance=1, pool=1)  # a course on the license pays nothing for others
    key = make_key(license)
    answer = client.post("/v1/embeddings", headers={"Authorization": f"Bearer {key}"}, json=BODY)
    assert answer.status_code == 200
    assert answer.json()["usage"]["credits_remaining"] == 4
    assert wallets(license) == {"license": 1}
    assert Transaction.objects.get(license=license).course_id is None


def test_a_course_key_without_an_end_user_has_its_key_allowance(
    catalog, client, make_license, make_key
):
    license = make_license(name="keys")
    course = make_course(license, allowance=1)
    key = make_key(license)
    row = ApiKey.objects.get(license=license)
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    clear_all()
    headers = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/embeddings", headers=headers, json=BODY).status_code == 200
    assert client.post("/v1/embeddings", headers=headers, json=BODY).status_code == 400
    assert wallets(license)[f"course:{course.id}:key:{row.id}"] == 1


# --- top-ups, levels and the store directly ----------------------------------------------------


def test_a_top_up_counts_only_in_its_period(make_license, make_key, monkeypatch):
    license = make_license(name="topped")
    course = make_course(license, allowance=10, period="week", tz="Europe/Berlin")
    _, end_user = member_key(
        make_key,
        course,
        top_up=5,
        top_up_window_start=utc(2026, 3, 25, 12),  # a Wednesday
    )
    found = course_budget(course.id, end_user.id)
    assert found is not None
    holder = f"user:{end_user.id}"
    # Same week (Monday 23 March local midnight to Sunday 29 March's end): 15.
    for now in (utc(2026, 3, 22, 23), utc(2026, 3, 29, 21, 59)):
        (allowance,) = course_levels(found, license_id=license.id, holder=holder, now=now)
        assert allowance.config.limit == 15, now
    # The weeks before and after: 10.
    for now in (utc(2026, 3, 22, 22, 59), utc(2026, 3, 29, 22)):
        (allowance,) = course_levels(found, license_id=license.id, holder=holder, now=now)
        assert allowance.config.limit == 10, now


def _course_state(license, course, holder):
    return budget_check(
        license_id=license.id,
        config=license_budget(license),
        holder=holder,
        course_id=course.id,
        end_user_id=None,
    )


def license_budget(license):
    from licensing.ledger.budget import BudgetConfig

    return BudgetConfig(
        license.budget_unit, license.budget_strategy, license.budget_period, license.budget_limit
    )


@pytest.mark.django_db(transaction=True)
def test_a_batch_charges_every_level_once_and_answers_the_smallest(make_license, db_route):
    license = make_license(name="batched", limit=1_000)
    course = make_course(license, allowance=50, pool=100)
    states = [_course_state(license, course, f"key:{n}") for n in (1, 2)]
    plain = make_license(name="plain", limit=1_000)
    plain_state = _course_state(plain, make_course(plain, code="X"), "key:3")
    plain_state.levels = ()  # a plain request in the same batch

    async def write_all():
        try:
            return await asyncio.gather(
                *(
                    transaction_record(
                        entry=entry_for(lic, f"req-{i}", credits=i + 1, course_id=cid),
                        budget=state,
                    )
                    for i, (lic, state, cid) in enumerate(
                        [
                            (license, states[0], course.id),
                            (license, states[1], course.id),
                            (plain, plain_state, None),
                        ]
                        * 3
                    )
                )
            )
        finally:
            await pgpool.close_all()

    remaining = asyncio.run(write_all())
    assert spool_depth() == 0
    spent = wallets(license)
    assert spent == {
        "license": 1 + 2 + 4 + 5 + 7 + 8,
        f"course:{course.id}:key:1": 1 + 4 + 7,
        f"course:{course.id}:key:2": 2 + 5 + 8,
        f"course:{course.id}": 1 + 2 + 4 + 5 + 7 + 8,
    }
    assert wallets(plain) == {"license": 3 + 6 + 9}
    assert ledger_sum(course=course) == spent[f"course:{course.id}"]
    # Each answer is the smallest level after its own charge: the student's allowance here.
    key1 = sorted(remaining[i] for i in (0, 3, 6))
    assert key1[0] == 50 - spent[f"course:{course.id}:key:1"]
    assert remaining[2::3] and all(r is not None and r > 900 for r in remaining[2::3])


@pytest.mark.django_db(transaction=True)
def test_the_spool_replays_a_course_charge_once(make_license):
    license = make_license(name="spooled", limit=1_000)
    course = make_course(license, allowance=50, pool=100)
    state = _course_state(license, course, "key:1")
    entry = entry_for(license, "req-spooled", credits=7, course_id=course.id)
    replayed_entry, replayed = _decode(_encode(entry, state))
    assert [level.key.holder for level in replayed.levels] == [
        f"course:{course.id}:key:1",
        f"course:{course.id}",
    ]
    assert transaction_record_once(entry=replayed_entry, budget=replayed)
    again_entry, again = _decode(_encode(entry, state))
    assert not transaction_record_once(entry=again_entry, budget=again)  # already in
    assert wallets(license) == {
        "license": 7,
        f"course:{course.id}:key:1": 7,
        f"course:{course.id}": 7,
    }
    assert Transaction.objects.get(request_id="req-spooled").course_id == course.id


# --- two worker processes on PostgreSQL ---------------------------------------------------------

THREADS = 12  # requests in flight at most: the overshoot bound of every level


@pytest.fixture
def two_workers(transactional_db, tmp_path, catalog):
    from django.db import connection

    from tests.processes import running_workers

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    with running_workers(2, tmp_path) as workers:
        yield workers


def _fire(workers, keys: list[str], count: int):
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    clients = [httpx.Client(base_url=w.url, timeout=30) for w in workers]
    try:

        def one(n):
            key = keys[n % len(keys)]
            headers = {"Authorization": f"Bearer {key}"}
            return key, clients[n % len(clients)].post("/v1/embeddings", headers=headers, json=BODY)

        with ThreadPoolExecutor(THREADS) as pool:
            return list(pool.map(one, range(count)))
    finally:
        for client in clients:
            client.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("allowance", "pool", "license_limit", "first"),
    [
        (20, 200, 200, "allowance"),  # each student's allowance runs out, nothing else
        (200, 30, 200, "pool"),  # the course pool runs out before any allowance
        (200, 200, 30, "license"),  # the license runs out before the course's levels
        # The first student sends three requests in five: their allowance runs out, then the
        # pool while the two others still have some of theirs.
        (15, 40, 200, "allowance, then pool"),
    ],
)
def test_levels_hold_under_concurrent_requests_on_two_workers(
    two_workers, make_license, make_key, allowance, pool, license_limit, first
):
    license = make_license(name="school", limit=license_limit, period="daily")
    course = make_course(license, allowance=allowance, pool=pool)
    students = [member_key(make_key, course, subject=f"s{n}") for n in range(3)]
    keys = [key for key, _ in students]
    if "then" in first:
        keys = [keys[0], keys[0], keys[0], keys[1], keys[2]]
    answers = _fire(two_workers, keys, 300)
    ok = [(k, r) for k, r in answers if r.status_code == 200]
    refused = [r for _, r in answers if r.status_code == 400]
    assert len(ok) + len(refused) == len(answers), {r.status_code for _, r in answers}
    assert ok and refused, first
    assert {r.json()["error"]["message"] for r in refused} == {OUT_OF_BUDGET}

    charged = Transaction.objects.filter(license=license, credits__gt=0)
    assert {r.headers["X-Request-Id"] for _, r in ok} == set(
        charged.values_list("request_id", flat=True)
    )
    assert set(charged.values_list("course_id", flat=True)) == {course.id}
    spent = wallets(license)
    # The ledger equals the wallets at every level.
    assert spent["license"] == ledger_sum(license=license) == len(ok)
    assert spent[f"course:{course.id}"] == len(ok)
    for key, end_user in students:
        mine = ledger_sum(license=license, end_user=end_user)
        assert spent[f"course:{course.id}:user:{end_user.id}"] == mine
        assert mine == sum(1 for k, _ in ok if k == key)
        assert mine <= allowance + THREADS  # overshoot: the requests in flight at most
    assert spent[f"course:{course.id}"] <= pool + THREADS
    assert spent["license"] <= license_limit + THREADS
    # The level that ran out is spent (to its limit at least); the others are not.
    levels = {
        "allowance": any(
            spent[f"course:{course.id}:user:{u.id}"] >= allowance for _, u in students
        ),
        "pool": spent[f"course:{course.id}"] >= pool,
        "license": spent["license"] >= license_limit,
    }
    assert {name for name, out in levels.items() if out} == {first.split(",")[0]} | (
        {"pool"} if "pool" in first else set()
    )
    assert Transaction.objects.filter(license=license, error_code="out_of_budget").count() == len(
        refused
    )


def test_the_ledger_api_and_csv_name_the_course(catalog, client, make_license, make_key):
    import csv
    import io

    from tests.console.test_manage_api import token_client, user_with

    license = make_license(name="listed", limit=10)
    course = make_course(license, allowance=5)
    key, _ = member_key(make_key, course)
    answer = client.post("/v1/embeddings", headers={"Authorization": f"Bearer {key}"}, json=BODY)
    assert answer.status_code == 200
    row = Transaction.objects.get(license=license)
    manager = token_client(user_with(None, superuser=True))
    body = manager.get(f"/manage/v1/transactions/{row.pk}").json()
    assert (body["course"], body["course_code"]) == (course.id, "CS101")
    exported = manager.get(f"/manage/v1/transactions/{row.pk}", {"format": "csv"})
    text = b"".join(exported.streaming_content).decode()
    assert [line["course"] for line in csv.DictReader(io.StringIO(text))] == ["CS101"]


def test_the_allowance_turns_over_at_local_midnight_on_a_dst_day(
    catalog, client, make_license, make_key
):
    from core import clock

    license = make_license(name="berlin")
    course = make_course(license, allowance=2, tz="Europe/Berlin")
    key, end_user = member_key(make_key, course)
    headers = {"Authorization": f"Bearer {key}"}
    holder = f"course:{course.id}:user:{end_user.id}"

    def status() -> int:
        return client.post("/v1/embeddings", headers=headers, json=BODY).status_code

    # 25 October 2026, 25 hours long in Berlin: it starts at 24 Oct 22:00 UTC and ends at
    # 25 Oct 23:00 UTC (an hour later than the UTC day).
    with clock.frozen(utc(2026, 10, 25, 22, 30).timestamp()) as frozen:
        assert [status(), status(), status()] == [200, 200, 400]
        frozen.advance(29 * 60)  # 22:59 UTC, 23:59 in Berlin: still the same day
        assert status() == 400
        frozen.advance(60)  # local midnight: a new allowance
        assert status() == 200
    windows = dict(
        Wallet.objects.filter(license=license, holder=holder).values_list("window_start", "spent")
    )
    assert windows == {utc(2026, 10, 24, 22): 2, utc(2026, 10, 25, 23): 1}

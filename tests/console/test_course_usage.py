"""licensing.courses.usage: the per-student usage teachers see (admin, API, portal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from licensing.access.services import license_create
from licensing.courses.usage import NO_STUDENT, course_usage
from licensing.ledger.budget import course_window_start
from licensing.models import Course, CourseMember, EndUser, Outcome, Transaction, Wallet

pytestmark = pytest.mark.both_databases

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday


def _row(n, *, course, end_user, credits=0, model="gpt-4o-mini", outcome=Outcome.SUCCESS, at=NOW):
    return Transaction.objects.create(
        request_id=f"r{n}",
        created_at=at,
        license=course.license,
        end_user=end_user,
        course=course,
        service="chat",
        requested_model=model,
        provider="direct",
        status_code=200 if outcome == Outcome.SUCCESS else 403,
        credits=credits,
        outcome=outcome,
    )


@pytest.fixture
def course(db):
    lic = license_create(name="lic", institution="Inst", limit=None, period="monthly")
    lic.institution.timezone = "Europe/Berlin"
    lic.institution.save()
    return Course.objects.create(
        institution=lic.institution,
        license=lic,
        name="Intro",
        code="CS101",
        allowance=1000,
        allowance_period="week",
    )


def test_one_row_per_member_with_counts_credits_models_and_period(course):
    user = get_user_model().objects.create(username="ada", first_name="Ada", last_name="L")
    ada = EndUser.objects.create(license=course.license, subject="s-ada", user=user)
    bob = EndUser.objects.create(license=course.license, subject="s-bob")
    idle = EndUser.objects.create(license=course.license, subject="s-idle")
    gone = EndUser.objects.create(license=course.license, subject="s-gone")
    period = course_window_start("week", NOW, "Europe/Berlin")
    CourseMember.objects.create(course=course, end_user=ada, top_up=500, top_up_window_start=period)
    CourseMember.objects.create(course=course, end_user=bob, paused=True)
    CourseMember.objects.create(course=course, end_user=idle)
    _row(1, course=course, end_user=ada, credits=300)
    _row(2, course=course, end_user=ada, credits=200, model="gpt-4o")
    _row(3, course=course, end_user=ada, credits=100)
    _row(4, course=course, end_user=ada, outcome=Outcome.DENIED)
    _row(5, course=course, end_user=bob, credits=7, at=NOW - timedelta(days=40))
    _row(6, course=course, end_user=gone, credits=9)
    _row(7, course=course, end_user=None, credits=11)
    Wallet.objects.create(
        license=course.license,
        holder=f"course:{course.pk}:user:{ada.pk}",
        period="week",
        window_start=period,
        unit="micro_credits",
        spent=600,
    )

    usage = course_usage(course, now=NOW)

    assert [r.student for r in usage.rows] == ["Ada L", "s-bob", "s-idle", "s-gone", NO_STUDENT]
    ada_row = usage.rows[0]
    assert (ada_row.requests, ada_row.refusals, ada_row.credits) == (3, 1, 600)
    assert ada_row.models == ("gpt-4o-mini", "gpt-4o")
    assert (ada_row.period_used, ada_row.allowance, ada_row.period_remaining) == (600, 1500, 900)
    assert usage.rows[1].paused and usage.rows[1].allowance == 1000
    assert usage.rows[2].requests == 0 and usage.rows[2].last_at is None
    assert not usage.rows[3].member and usage.rows[3].credits == 9
    assert usage.rows[4].end_user_id is None and usage.rows[4].allowance is None
    assert (usage.requests, usage.refusals, usage.credits) == (6, 1, 627)
    assert usage.period_start == period

    recent = course_usage(course, since=NOW - timedelta(days=30), now=NOW)
    assert [r.credits for r in recent.rows][:2] == [600, 0]


def test_another_course_rows_never_count(course):
    other = Course.objects.create(
        institution=course.institution, license=course.license, name="X", code="X1"
    )
    eu = EndUser.objects.create(license=course.license, subject="s")
    CourseMember.objects.create(course=course, end_user=eu)
    _row(1, course=other, end_user=eu, credits=50)
    usage = course_usage(course, now=NOW)
    assert [(r.student, r.credits, r.requests) for r in usage.rows] == [("s", 0, 0)]

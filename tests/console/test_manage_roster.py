"""The roster sync at an LMS's size (issue 35): 10,000 students in a bounded number of queries
(bulk reads and writes, not a dozen queries a student), one audit row with the counts, keys of
the members removed revoked, the caches cleared; bounded in time (ROSTER_TIME_LIMIT: a 503,
rolled back); and a request whose client leaves still gets its access-log line."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from django.db import connection
from django.test import RequestFactory

from gateway_site.middleware import RequestContextMiddleware
from licensing.access.credentials import api_key_create
from licensing.courses import services as course_services
from licensing.models import ApiKey, AuditEvent, Course, CourseMember, EndUser

from .test_admin import make_licensing
from .test_manage_api import BASE, token_client, user_with

pytestmark = pytest.mark.both_databases

N = 10_000


def _most(queries: int) -> int:
    """`queries` on PostgreSQL. SQLite takes at most 999 parameters a statement, so there Django
    cuts a bulk insert of 10,000 rows into ~80 (and the reads by id and subject into ~10 each):
    still far from one query a student."""
    return queries + (N // 50 if connection.features.max_query_params else 0)


@pytest.fixture
def world(db):
    return {"a": make_licensing("a")}


def _sync(client, course, students, params=""):
    return client.put(
        f"{BASE}/courses/{course.pk}/members{params}",
        {"students": students},
        content_type="application/json",
    )


def test_a_roster_of_10000_is_a_bounded_number_of_queries(
    world, django_assert_max_num_queries, settings
):
    a = world["a"]
    course, lic, old = a["course"], a["license"], a["end_user"]  # old: a member, not listed
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 2**20
    client = token_client(user_with("admin", a["institution"]))
    kept = EndUser.objects.create(license=lic, subject="kept")
    CourseMember.objects.create(course=course, end_user=kept)
    known = EndUser.objects.create(license=lic, subject="known")
    key, _ = api_key_create(license=lic, name="lab", end_user=old, course=course)
    roster = ["kept", known.pk, *(f"student-{i}" for i in range(N - 2))]

    with django_assert_max_num_queries(_most(20)):
        dry = _sync(client, course, roster, "?dry_run=true")
    assert dry.status_code == 200, dry.content[:300]
    assert (dry.json()["added"], dry.json()["removed"], dry.json()["kept"]) == (N - 1, 1, 1)
    assert EndUser.objects.filter(license=lic).count() == 3

    with django_assert_max_num_queries(_most(30)):
        done = _sync(client, course, roster)
    assert done.status_code == 200, done.content[:300]
    body = done.json()
    assert (body["added"], body["removed"], body["kept"], body["dry_run"]) == (N - 1, 1, 1, False)
    assert body["add"][:2] == [known.pk, "student-0"] and body["remove"] == ["user-a"]
    members = set(CourseMember.objects.filter(course=course).values_list("end_user", flat=True))
    made = set(
        EndUser.objects.filter(license=lic, subject__startswith="student-").values_list(
            "pk", flat=True
        )
    )
    assert len(made) == N - 2 and members == {kept.pk, known.pk} | made
    assert ApiKey.objects.get(pk=key.pk).active is False
    (audit,) = AuditEvent.objects.filter(
        action=AuditEvent.Action.COURSE_MEMBER_CHANGED, target=f"course:{course.pk}"
    )
    assert audit.detail["roster_sync"] == {
        "added": N - 1,
        "removed": 1,
        "kept": 1,
        "end_users_made": N - 2,
        "keys_revoked": 1,
    }
    assert audit.detail["removed_end_users"] == [old.pk] and audit.detail["revoked_keys"] == [
        key.pk
    ]
    assert len(audit.detail["added_end_users"]) == N - 1

    with django_assert_max_num_queries(_most(20)):
        again = _sync(client, course, roster).json()
    assert (again["added"], again["removed"], again["kept"]) == (0, 0, N)
    assert AuditEvent.objects.filter(action=AuditEvent.Action.COURSE_MEMBER_CHANGED).count() == 1


def test_a_sync_past_its_time_limit_is_a_503_and_changes_nothing(world, monkeypatch):
    a = world["a"]
    course = a["course"]
    client = token_client(user_with("admin", a["institution"]))
    monkeypatch.setattr(course_services, "ROSTER_TIME_LIMIT", 0)
    answer = _sync(client, course, ["new-1", "new-2"])
    assert answer.status_code == 503, answer.content
    assert "longer than 0 s and was rolled back" in answer.json()["detail"]
    assert not EndUser.objects.filter(subject__startswith="new-").exists()
    assert list(CourseMember.objects.filter(course=course).values_list("end_user", flat=True)) == [
        a["end_user"].pk
    ]


@pytest.mark.django_db(transaction=True)
def test_a_sync_waiting_past_its_time_limit_on_postgresql_is_cancelled(monkeypatch):
    """PostgreSQL's statement_timeout bounds each statement, lock waits included: a sync that
    waits for another's course lock past the limit is cancelled (a 503), not left running."""
    if connection.vendor != "postgresql":
        pytest.skip("statement_timeout is PostgreSQL's")
    a = make_licensing("a")
    course = a["course"]
    client = token_client(user_with("admin", a["institution"]))
    monkeypatch.setattr(course_services, "ROSTER_TIME_LIMIT", 0.2)
    locked, release = threading.Event(), threading.Event()

    def hold_the_course_lock():
        from django.db import connection as own
        from django.db import transaction

        try:
            with transaction.atomic():
                Course.objects.select_for_update().filter(pk=course.pk).first()
                locked.set()
                release.wait(30)
        finally:
            own.close()

    holder = threading.Thread(target=hold_the_course_lock)
    holder.start()
    try:
        assert locked.wait(30)
        answer = _sync(client, course, ["new-1"])
    finally:
        release.set()
        holder.join()
    assert answer.status_code == 503, answer.content
    assert not EndUser.objects.filter(subject="new-1").exists()


@pytest.mark.django_db(transaction=True)
def test_two_courses_syncing_the_same_new_subjects_at_once_make_each_end_user_once():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    a = make_licensing("a")
    lic = a["license"]
    other = Course.objects.create(institution=lic.institution, license=lic, code="C2", name="2")
    client = token_client(user_with("admin", a["institution"]))
    roster = [f"s-{i}" for i in range(200)]
    barrier = threading.Barrier(2)
    answers: list[int] = []

    def sync(course):
        from django.db import connection as own

        try:
            barrier.wait()
            answers.append(_sync(client, course, roster).status_code)
        finally:
            own.close()

    threads = [threading.Thread(target=sync, args=(c,)) for c in (a["course"], other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200, 200]
    assert EndUser.objects.filter(license=lic, subject__startswith="s-").count() == 200
    for course in (a["course"], other):
        assert CourseMember.objects.filter(course=course).count() == 200


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_a_request_whose_client_left_still_has_its_access_line():
    async def cancelled(request):
        raise asyncio.CancelledError  # what gateway_site.handler does when the client leaves

    request = RequestFactory().put(f"{BASE}/courses/1/members")
    lines, logger = _Lines(), logging.getLogger("gateway.access")
    logger.addHandler(lines)
    try:
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(RequestContextMiddleware(cancelled)(request))
    finally:
        logger.removeHandler(lines)
    (line,) = lines.records
    assert (line.method, line.path, line.status) == ("PUT", f"{BASE}/courses/1/members", 499)
    assert line.error_code == "client_closed_request"

"""A teacher's switch reaches every worker within a second (issue 26, item 3): exam mode, a
closing window and a pause, saved in this process, refused by two worker processes that had
the course's snapshot cached (a long TTL: only the invalidation can tell them)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from licensing.access.credentials import api_key_create
from licensing.courses.rules import closed_message
from licensing.models import ApiKey, Course, CourseMember, CourseWindow, EndUser
from tests.access import test_cache_invalidation as shared

# Two workers per invalidation mechanism (the generation file, Redis), as for keys and licenses.
redis_server, invalidation = shared.redis_server, shared.invalidation
worker_processes, workers = shared.worker_processes, shared.workers

BODY = {"model": "text-embedding-3-small", "input": "x", "encoding_format": "float"}


def _post(worker, headers):
    response = worker.http.post("/v1/embeddings", headers=headers, json=BODY)
    return response.status_code, response.json().get("error", {}).get("message")


def _all_answer(procs, headers, expected, limit=1.0) -> float:
    """Poll every worker until each answers `expected` (status, message); the slowest's
    seconds. A deadline, no sleep for a change to happen."""
    started, took = time.monotonic(), {}
    while len(took) < len(procs) and time.monotonic() - started < limit + 2:
        for i, worker in enumerate(procs):
            if i not in took and _post(worker, headers) == expected:
                took[i] = time.monotonic() - started
        time.sleep(0.01)
    assert len(took) == len(procs), f"workers still answering the old state: {took}"
    return max(took.values())


def _switch_exam(course):
    course.exam_mode = True
    course.save()
    return (403, "course 'CS101' is in exam mode")


def _close_now(course):
    # A window that started and ended in the past, one that opens tomorrow: closed until then.
    now = timezone.now()
    opens = (now + timedelta(days=1)).replace(microsecond=0)
    CourseWindow.objects.create(course=course, starts_at=now - timedelta(hours=2), ends_at=now)
    CourseWindow.objects.create(course=course, starts_at=opens, ends_at=now + timedelta(days=2))
    return (403, closed_message("CS101", opens, "UTC"))


def _pause(course):
    member = CourseMember.objects.get(course=course)
    member.paused = True
    member.save()
    return (403, "course 'CS101' has paused your access")


@pytest.mark.slow
@pytest.mark.parametrize("change", [_switch_exam, _close_now, _pause])
def test_a_course_switch_is_refused_by_every_worker_within_a_second(
    catalog, workers, make_license, change
):
    license = make_license()
    course = Course.objects.create(
        institution=license.institution, license=license, name="Intro", code="CS101"
    )
    student = EndUser.objects.create(license=license, subject="s1")
    CourseMember.objects.create(course=course, end_user=student)
    row, key = api_key_create(license=license, end_user=student)
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    headers = {"Authorization": f"Bearer {key}"}
    for worker in workers:
        # The second answer comes from the worker's caches (the course snapshot too).
        assert [_post(worker, headers)[0] for _ in range(2)] == [200, 200]

    expected = change(course)
    took = _all_answer(workers, headers, expected)
    print(f"{expected[1]!r} on every worker after {took * 1000:.0f} ms")
    assert took < 1.0

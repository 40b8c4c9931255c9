"""Course rules in time (licensing.courses.rules): windows, exam mode and paused members, on an
instant the test gives (no clock of their own)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from core.errors import PolicyDenied, ServiceUnavailable
from licensing.courses.rules import CourseRules, compile_course_policies, course_gate, local_iso
from licensing.rules.policy import open_policy_document

OPEN = open_policy_document()


def compile_exam_policy(document):
    """The exam policy over the open policy, with no course overlay."""
    policy, broken, exam, exam_broken = compile_course_policies(OPEN, {}, document)
    assert (policy, broken) == (None, False)
    if exam_broken:
        raise ValueError("broken")
    return exam


T0 = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)  # 08:00 in Berlin (CET, UTC+1)
HOUR = timedelta(hours=1)


def rules(**kwargs) -> CourseRules:
    base = CourseRules(
        id=1,
        code="CS101",
        active=True,
        exam_mode=False,
        exam_policy=None,
        exam_policy_broken=False,
        access_windows=(),
        exam_windows=(),
        paused=frozenset(),
        timezone="Europe/Berlin",
    )
    return replace(base, **kwargs)


def refusal(course: CourseRules, now: datetime, end_user_id: int | None = 7) -> str:
    with pytest.raises(PolicyDenied) as caught:
        course_gate(course, now=now, end_user_id=end_user_id)
    assert caught.value.status == 403 and caught.value.param is None
    return caught.value.message


def test_an_open_course_without_windows_adds_nothing():
    assert course_gate(rules(), now=T0, end_user_id=7) is None


def test_an_inactive_course_is_closed_without_a_date_even_with_later_windows():
    course = rules(active=False, access_windows=((T0 + HOUR, T0 + 2 * HOUR),))
    assert refusal(course, T0) == "course 'CS101' is closed"


def test_access_window_edges_are_half_open():
    course = rules(access_windows=((T0, T0 + HOUR),))
    assert course_gate(course, now=T0, end_user_id=7) is None  # the first instant is inside
    last = T0 + HOUR - timedelta(microseconds=1)
    assert course_gate(course, now=last, end_user_id=7) is None
    # The end is outside, and no later window: closed with no date.
    assert refusal(course, T0 + HOUR) == "course 'CS101' is closed"


def test_closed_until_the_next_window_in_the_institutions_time_zone():
    windows = ((T0 + 5 * HOUR, T0 + 6 * HOUR), (T0 + HOUR, T0 + 2 * HOUR), (T0 - 3 * HOUR, T0))
    course = rules(access_windows=windows)
    # The earliest later start, shown in Berlin's offset (winter: +01:00), to the second.
    assert refusal(course, T0) == "course 'CS101' is closed until 2026-11-27T09:00:00+01:00"
    assert refusal(replace(course, timezone="America/New_York"), T0) == (
        "course 'CS101' is closed until 2026-11-27T03:00:00-05:00"
    )
    assert refusal(replace(course, timezone="UTC"), T0) == (
        "course 'CS101' is closed until 2026-11-27T08:00:00+00:00"
    )


def test_two_adjacent_windows_leave_no_gap():
    course = rules(access_windows=((T0 - HOUR, T0), (T0, T0 + HOUR)))
    assert course_gate(course, now=T0, end_user_id=7) is None


def test_summer_time_is_the_offset_of_that_day():
    summer = datetime(2026, 7, 1, 6, 0, tzinfo=UTC)
    course = rules(access_windows=((summer + HOUR, summer + 2 * HOUR),))
    assert refusal(course, summer) == "course 'CS101' is closed until 2026-07-01T09:00:00+02:00"


def test_an_unknown_zone_falls_back_to_utc():
    assert local_iso(T0, "Mars/Olympus") == "2026-11-27T07:00:00+00:00"
    assert local_iso(T0.replace(microsecond=123), "") == "2026-11-27T07:00:00+00:00"


def test_a_paused_member_is_refused_and_others_are_not():
    course = rules(paused=frozenset({7}))
    assert refusal(course, T0, end_user_id=7) == "course 'CS101' has paused your access"
    assert course_gate(course, now=T0, end_user_id=8) is None
    assert course_gate(course, now=T0, end_user_id=None) is None


def test_closed_comes_before_paused_and_paused_before_exam():
    later = ((T0 + HOUR, T0 + 2 * HOUR),)
    course = rules(paused=frozenset({7}), exam_mode=True, access_windows=later)
    assert refusal(course, T0) == "course 'CS101' is closed until 2026-11-27T09:00:00+01:00"
    assert refusal(replace(course, active=False), T0) == "course 'CS101' is closed"
    assert refusal(replace(course, access_windows=()), T0) == (
        "course 'CS101' has paused your access"
    )


def test_exam_switch_without_an_exam_policy_refuses_everything():
    assert refusal(rules(exam_mode=True), T0) == "course 'CS101' is in exam mode"


def test_exam_windows_edges():
    course = rules(exam_windows=((T0, T0 + HOUR),))
    assert course_gate(course, now=T0 - timedelta(microseconds=1), end_user_id=7) is None
    assert refusal(course, T0) == "course 'CS101' is in exam mode"
    assert refusal(course, T0 + HOUR - timedelta(seconds=1)) == "course 'CS101' is in exam mode"
    assert course_gate(course, now=T0 + HOUR, end_user_id=7) is None


def test_exam_mode_with_an_exam_policy_returns_the_narrower_policy():
    exam = compile_exam_policy({"services": {"chat_completions": {"providers": ["direct"]}}})
    assert exam is not None
    course = rules(exam_mode=True, exam_policy=exam)
    assert course_gate(course, now=T0, end_user_id=7) is exam
    # The exam policy's own refusals are the spec's messages.
    with pytest.raises(PolicyDenied) as caught:
        exam.check_request("embeddings", {})
    assert caught.value.message == "service 'embeddings' is not enabled for this license"
    # Outside exam mode the exam policy plays no part.
    assert course_gate(replace(course, exam_mode=False), now=T0, end_user_id=7) is None


def test_a_broken_exam_policy_is_503_only_in_exam_mode():
    course = rules(exam_policy_broken=True)
    assert course_gate(course, now=T0, end_user_id=7) is None
    with pytest.raises(ServiceUnavailable):
        course_gate(replace(course, exam_mode=True), now=T0, end_user_id=7)


@pytest.mark.parametrize("document", [None, {}])
def test_an_empty_exam_policy_means_every_service_off(document):
    assert compile_exam_policy(document) is None


@pytest.mark.parametrize(
    "document", ["x", [1], {"services": {"nope": {}}}, {"version": 9}, {"services": []}]
)
def test_an_exam_policy_that_cannot_be_evaluated(document):
    with pytest.raises(ValueError):
        compile_exam_policy(document)


def test_the_exam_policy_narrows_the_course_overlay_which_narrows_the_license_type():
    base = {"version": 1, "services": {"embeddings": {}, "chat_completions": {}}}
    overlay = {"services": {"embeddings": {"params": {"dimensions": {"max": 64}}}}}
    exam = {"services": {"embeddings": {"params": {"dimensions": {"max": 8}}}}}
    policy, broken, exam_policy, exam_broken = compile_course_policies(base, overlay, exam)
    assert not broken and not exam_broken and policy is not None and exam_policy is not None
    assert set(policy.services) == {"embeddings"}  # the overlay keeps embeddings only
    policy.check_request("embeddings", {"dimensions": 64})
    with pytest.raises(PolicyDenied):
        policy.check_request("embeddings", {"dimensions": 65})
    with pytest.raises(PolicyDenied):
        exam_policy.check_request("embeddings", {"dimensions": 9})
    # A widening exam policy still cannot let through what the course refuses.
    wide = {"services": {"chat_completions": {}, "embeddings": {}}}
    _, _, exam_policy, _ = compile_course_policies(base, overlay, wide)
    assert exam_policy is not None and set(exam_policy.services) == {"embeddings"}
    with pytest.raises(PolicyDenied):
        exam_policy.check_request("embeddings", {"dimensions": 65})


def test_an_empty_overlay_is_the_license_type_and_a_broken_one_is_flagged():
    assert compile_course_policies(OPEN, {}, None) == (None, False, None, False)
    assert compile_course_policies(OPEN, ["x"], None)[:2] == (None, True)
    rules_ = rules(policy_broken=True)
    with pytest.raises(ServiceUnavailable):
        course_gate(rules_, now=T0, end_user_id=7)

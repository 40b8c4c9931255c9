"""A teacher's course page in a real browser (Debian's chromium, the README's `scripts/run.sh`
server): the teacher signs in, sees only the course they teach, unticks a model in the overlay
form and saves, adds an exam window with the admin's date pickers (in the institution's time
zone), switches exam mode on and sees the per-student usage; then a /v1 request with the
student's course key is refused "course 'CS101' is in exam mode". Screenshots in
var/screenshots/ (teacher-course-*.png); docs/teacher-course.png is a copy of one."""

from __future__ import annotations

import json
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import httpx

from tests.browser import BROWSER_TEST, SHOTS, login, shot

pytestmark = BROWSER_TEST

# Run with `manage.py shell -c` on run.sh's database: the demo school in Berlin time and euros,
# a license whose type allows three chat models, the course CS101 (its overlay keeps two) and
# another course, a teacher of CS101 with a password, and a student with a course key who has
# made no request yet. Prints the key.
SETUP = """
import json
from django.contrib.auth import get_user_model
from licensing.courses.services import course_create, course_key_create, course_member_add
from licensing.access.services import license_create
from licensing.models import AdminProfile, CourseTeacher, EndUser, Institution

school = Institution.objects.get(name="Demo school")
school.timezone, school.currency = "Europe/Berlin", "EUR"
school.save()
policy = {"version": 1, "services": {
    "chat_completions": {"params": {"model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                                    "max_tokens": {"max": 2000}}},
    "embeddings": {}}}
lic = license_create(name="Computer science", institution="Demo school", limit=50_000_000,
                     period="monthly", policy=policy)
course = course_create(license=lic, name="Introduction to programming", code="CS101",
                       allowance=2_000_000, allowance_period="week",
                       policy={"services": {"chat_completions": {"params": {
                           "model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]}}}}})
course_create(license=lic, name="Someone else's course", code="MATH7")
User = get_user_model()
teacher = User.objects.create_user("grace", password="teach-pw-1", is_staff=True,
                                   first_name="Grace", last_name="Hopper")
AdminProfile.objects.create(user=teacher, institution=school, role="teacher")
CourseTeacher.objects.create(course=course, user=teacher)
student = User.objects.create_user("ada", first_name="Ada", last_name="Lovelace")
end_user = EndUser.objects.create(license=lic, user=student, subject="ada-sub")
course_member_add(course=course, end_user=end_user)
_, key = course_key_create(course=course, end_user=end_user, name="Ada's key", via="test")
print("KEY", key)
"""

WINDOW = """
from licensing.models import CourseWindow
w = CourseWindow.objects.get(course__code="CS101")
print("WINDOW", w.kind, w.starts_at.isoformat(), w.ends_at.isoformat())
"""

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}


def _chat(server, key: str, model: str = "gpt-4o-mini") -> httpx.Response:
    return httpx.post(
        server.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={**CHAT, "model": model},
        timeout=30,
    )


def _pick(page, field: str, *, next_month: bool, day: str, time: str) -> None:
    """The admin's date picker (calendar) and time picker (clock) for a date-time field."""
    date_input = page.locator(f"input[name='{field}_0']")
    date_input.locator("xpath=following-sibling::span[1]//a[contains(@id, 'calendarlink')]").click()
    box = page.locator(".calendarbox:visible")
    if next_month:
        box.locator("a.calendarnav-next").click()
    box.locator(f"td:not(.nonday) a:text-is('{day}')").first.click()
    time_input = page.locator(f"input[name='{field}_1']")
    time_input.locator("xpath=following-sibling::span[1]//a[contains(@id, 'clocklink')]").click()
    page.locator(f".clockbox:visible a:text-is('{time}')").click()


def test_a_teacher_runs_their_course_in_the_admin(server, page):
    key = re.search(r"KEY (\S+)", server.manage("shell", "-c", SETUP)).group(1)
    # The student uses the course key twice: an answer, and a refusal (a model the license
    # type does not allow).
    assert _chat(server, key).status_code == 200
    refused = _chat(server, key, model="gpt-4o-audio-preview")
    assert refused.status_code == 403, refused.text

    login(page, server, "grace", "teach-pw-1")
    page.goto(server.url + "/admin/licensing/course/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and "CS101" in rows.first.inner_text()  # not MATH7
    page.click("#result_list a:has-text('CS101')")
    page.wait_for_selector("#overlay-form")
    assert "Europe/Berlin" in page.inner_text("#course-time-zone")
    beside = page.inner_text("#course-beside")
    assert "models: gpt-4o-mini, gpt-4.1; max_tokens ≤ 2000" in beside

    # The overlay form: untick gpt-4.1, save.
    overlay = "#overlay-form [data-service=chat_completions]"
    box = f"{overlay} input[name='overlayform-chat_completions__models'][value='gpt-4.1']"
    assert page.is_checked(box)
    assert page.locator(f"{overlay} input[value='gpt-4o-mini']").is_checked()
    page.uncheck(box)
    page.evaluate("document.getElementById('overlay-form').scrollIntoView()")
    page.screenshot(path=str(SHOTS / "teacher-course-0-overlay.png"))
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    assert not page.is_checked(box)
    page.click("summary:has-text('Overlay as JSON')")
    saved = json.loads(page.input_value("#id_policy"))
    assert saved["services"]["chat_completions"]["params"]["model"]["allowed"] == ["gpt-4o-mini"]

    # An exam window with the date pickers: next month's 1st, 6 a.m. to noon, Berlin time.
    page.click(".add-row a:has-text('Add another')")
    page.select_option("select[name='windows-0-kind']", "exam")
    _pick(page, "windows-0-starts_at", next_month=True, day="1", time="6 a.m.")
    _pick(page, "windows-0-ends_at", next_month=True, day="1", time="Noon")
    start_date = page.input_value("input[name='windows-0-starts_at_0']")
    assert page.input_value("input[name='windows-0-starts_at_1']") == "06:00:00"
    assert page.input_value("input[name='windows-0-ends_at_1']") == "12:00:00"
    # Exam mode on: every service off.
    page.check("#id_exam_mode")
    assert page.is_checked("input[name=exam_does][value=off]")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    assert page.is_checked("#id_exam_mode")

    # Stored as the UTC instant of 06:00 in Berlin on that day.
    printed = server.manage("shell", "-c", WINDOW)
    kind, starts, ends = re.search(r"WINDOW (\S+) (\S+) (\S+)", printed).groups()
    local = datetime.fromisoformat(start_date + "T06:00:00").replace(
        tzinfo=ZoneInfo("Europe/Berlin")
    )
    assert kind == "exam" and datetime.fromisoformat(starts) == local

    # The per-student usage: Ada's answer and refusal.
    usage = page.inner_text("#course-usage")
    assert "Ada Lovelace" in usage and "gpt-4o-mini" in usage
    ada = page.locator("#course-usage tr.usage-row").first.inner_text().split("\t")
    assert ada[1:3] == ["1", "1"], ada  # one request answered, one refused
    page.locator("#course-usage").scroll_into_view_if_needed()
    shot(page, "teacher-course-1-saved")
    page.set_viewport_size({"width": 1440, "height": 1400})
    page.goto(page.url)
    page.wait_for_selector("#course-beside")
    page.evaluate("document.getElementById('course-beside').scrollIntoView()")
    page.screenshot(path=str(SHOTS / "teacher-course.png"))
    page.set_viewport_size({"width": 1440, "height": 900})

    # "Try a request" on the course judges by its rules now: exam mode.
    page.locator("#try-request").scroll_into_view_if_needed()
    page.click("#try-submit")
    page.wait_for_selector("#try-result p")
    result = page.inner_text("#try-result")
    assert "course 'CS101' is in exam mode" in result, result
    shot(page, "teacher-course-2-try")
    page.evaluate("document.getElementById('try-request').scrollIntoView()")
    page.screenshot(path=str(SHOTS / "teacher-course-usage.png"))
    page.evaluate("document.getElementById('course-time-zone').scrollIntoView()")
    page.screenshot(path=str(SHOTS / "teacher-course-windows.png"))

    # The student's next request: refused by exam mode.
    answer = _chat(server, key)
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == "course 'CS101' is in exam mode"

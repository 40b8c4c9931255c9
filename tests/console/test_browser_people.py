"""The admin without ids in a real browser (Debian's chromium, the README's `scripts/run.sh`
server; issue 37 item 5): an institution admin's front page greets them with the first-run
checklist and this month's spend in euros; on a course's page they add a student by typing part
of her name (the autocomplete offers only their institution's people) and a top-up in euros;
the course page opens from the admin; the license's budget is typed in euros; a teacher's front
page lists their course with its course page. Screenshots in var/screenshots/ (people-*.png)."""

from __future__ import annotations

import re

from tests.browser import BROWSER_TEST, SHOTS, login, shot

pytestmark = BROWSER_TEST

# This module's schools on the session's README server: People school (EUR, Berlin) with a
# license, a course, two named students and an admin and a teacher with passwords; Other
# people school with a student of the same first name, who must never be offered.
SETUP = """
from django.contrib.auth import get_user_model
from licensing.access.services import license_create
from licensing.courses.services import course_create
from licensing.models import AdminProfile, CourseTeacher, EndUser, Institution

User = get_user_model()
school, _ = Institution.objects.get_or_create(name="People school")
school.timezone, school.currency = "Europe/Berlin", "EUR"
school.save()
lic = license_create(name="People license", institution="People school", limit=40_000_000,
                     period="monthly", strategy="per_user")
course = course_create(license=lic, name="Introduction to AI", code="AI101",
                       allowance=2_000_000, allowance_period="week")
for username, first, last, email in (("stu-1001", "Ada", "Lovelace", "ada@people.example"),
                                     ("stu-1002", "Alan", "Turing", "alan@people.example")):
    user = User.objects.create_user(username, first_name=first, last_name=last, email=email)
    EndUser.objects.create(license=lic, user=user, subject=username)
other = license_create(name="Other people license", institution="Other people school")
stranger = User.objects.create_user("stu-9001", first_name="Ada", last_name="Stranger",
                                    email="ada@elsewhere.example")
EndUser.objects.create(license=other, user=stranger, subject="stu-9001")
admin = User.objects.create_user("pat", password="people-pw-1", is_staff=True,
                                 first_name="Pat", last_name="Principal")
AdminProfile.objects.create(user=admin, institution=school, role="admin")
teacher = User.objects.create_user("tess", password="people-pw-2", is_staff=True,
                                   first_name="Tess", last_name="Teacher")
AdminProfile.objects.create(user=teacher, institution=school, role="teacher")
CourseTeacher.objects.create(course=course, user=teacher)
print("COURSE", course.pk, "LICENSE", lic.pk)
"""


def test_an_admin_runs_their_institution_by_names_and_money(server, page):
    printed = server.manage("shell", "-c", SETUP)
    course_id, license_id = re.search(r"COURSE (\d+) LICENSE (\d+)", printed).groups()

    login(page, server, "pat", "people-pw-1")
    dashboard = page.inner_text("#dashboard")
    assert "Welcome to People school's gateway" in dashboard
    assert re.search(r"Spent in \w+ \d{4} \(Europe/Berlin\): 0\.00 EUR", dashboard), dashboard
    assert page.locator("#dashboard .step-license.done").count() == 1
    assert page.locator("#dashboard .step-sign_in.todo a").count() == 1  # a link to do it
    shot(page, "people-01-dashboard")  # docs/admin-home.png is a copy

    # A student added by typing part of her name: only this school's Ada is offered.
    page.goto(f"{server.url}/admin/licensing/course/{course_id}/change/")
    page.click("#members-group .add-row a")
    page.click("#members-group .dynamic-members .select2-selection")
    page.fill(".select2-container--open .select2-search__field", "ada")
    page.wait_for_selector(".select2-results__option:has-text('Lovelace')")
    offered = page.inner_text(".select2-results")
    assert "Ada Lovelace (ada@people.example)" in offered and "Stranger" not in offered
    page.locator(".select2-results").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "people-02-member-autocomplete.png"))  # the viewport
    page.click(".select2-results__option:has-text('Lovelace')")
    page.fill("#members-group .dynamic-members input[name$='-top_up']", "0.50")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    members = page.inner_text("#members-group")
    assert "Ada Lovelace (ada@people.example)" in members
    assert page.input_value("input[name='members-0-top_up']") == "0.50"
    assert page.input_value("#id_allowance") == "2.00"  # 2,000,000 micro-credits = 2.00 EUR
    assert "In EUR: 1 EUR = 1,000,000 micro-credits." in page.inner_text(".field-allowance")
    page.locator("#members-group").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "people-03-course-members.png"))
    page.locator(".field-allowance").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "people-03b-course-allowance.png"))

    # The course page, linked from the admin's.
    page.click("#course-page-link")
    page.wait_for_url(f"**/portal/courses/{course_id}/")
    assert "AI101" in page.inner_text("body")
    shot(page, "people-04-course-page")

    # The license's budget typed in euros, shown in euros with the micro-credits beside.
    page.goto(f"{server.url}/admin/licensing/license/{license_id}/change/")
    assert page.input_value("#id_budget_limit") == "40.00"
    page.fill("#id_budget_limit", "12.50")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    row = page.inner_text("#result_list tbody tr:has-text('People license')")
    assert "12.50 EUR (12,500,000 micro-credits) monthly per holder" in row
    shot(page, "people-05-license-list")

    # The end users by name and e-mail.
    page.goto(f"{server.url}/admin/licensing/enduser/?q=turing")
    listing = page.inner_text("#result_list")
    assert "Alan Turing" in listing and "alan@people.example" in listing
    assert "Lovelace" not in listing
    shot(page, "people-06-end-users")

    # A teacher's front page: their course, with its course page.
    page.context.clear_cookies()  # signed out (Django's logout is a POST)
    login(page, server, "tess", "people-pw-2")
    courses = page.inner_text("#dashboard-courses")
    assert "AI101" in courses and "Course page" in courses
    shot(page, "people-07-teacher-index")
    page.click("#dashboard-courses .course-page-link")
    page.wait_for_url(f"**/portal/courses/{course_id}/")

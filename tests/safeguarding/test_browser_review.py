"""The safeguarding review page in Chromium (Playwright), on the server started as the README
starts it (`scripts/run.sh`, the session's shared one): a safeguarding contact opens an alert
from the list by keyboard, reads the flagged message and closes it with a note, by keyboard;
a colleague whose language is German reads the same page in German; the institution admin's
settings page. Every page passes axe-core. Screenshots in var/screenshots/safeguarding-*.png."""

from __future__ import annotations

import pytest

from tests import browser as browser_helpers
from tests.browser import BROWSER_TEST, assert_accessible, shot, tab_to

pytestmark = BROWSER_TEST
SCHOOL = "Safeguard school"
MESSAGE = "I want to hurt myself"

# One shell on the server's database: the school, its student in a course, a safeguarding
# contact (English), another (German), an institution admin, alerts on, and an alert raised as
# the pipeline raises it. Prints the alert's id and the settings' id.
SETUP = f"""
from django.contrib.auth import get_user_model
from licensing.access.services import license_create
from licensing.models import AdminProfile, Course, CourseMember, EndUser, SafeguardingSettings
from licensing.safeguarding.rules import Verdict
from licensing.safeguarding.services import do_raise_alert
lic = license_create(name="safeguard-students", institution={SCHOOL!r})
school = lic.institution
course = Course.objects.create(institution=school, license=lic, name="Biology", code="BIO7")
pupil = get_user_model().objects.create_user("sg-pupil", first_name="Mia", last_name="Lind")
student = EndUser.objects.create(license=lic, user=pupil, subject="sg-pupil")
CourseMember.objects.create(course=course, end_user=student)
people = (
    ("sg-contact", "safeguarding", ""),
    ("sg-kontakt", "safeguarding", "de"),
    ("sg-admin", "admin", ""),
)
for name, role, language in people:
    user = get_user_model().objects.create_user(
        name, password="sg-Pass-1234", is_staff=True, email=name + "@school.example"
    )
    AdminProfile.objects.create(user=user, institution=school, role=role, language=language)
row = SafeguardingSettings.objects.create(institution=school, enabled=True)
verdict = Verdict(text={MESSAGE!r}, categories={{"self-harm": True}}, scores={{"self-harm": 0.91}})
alert = do_raise_alert(
    institution_id=school.pk, end_user_id=student.pk, course_id=course.pk,
    request_id="browser", direction="input", verdicts=[verdict],
)
print("IDS", alert.pk, row.pk)
"""


@pytest.fixture(scope="module")
def ids(server) -> tuple[int, int]:
    printed = server.manage("shell", "-c", SETUP)
    alert, settings = printed.split("IDS")[1].split()[:2]
    return int(alert), int(settings)


def test_a_contact_reads_and_closes_an_alert_by_keyboard(server, page, ids):
    alert, _settings = ids
    page.context.clear_cookies()
    browser_helpers.login(page, server, "sg-contact", "sg-Pass-1234")
    page.goto(server.url + "/admin/")
    assert page.inner_text("#safeguarding-alerts") == "1 safeguarding alert not closed"
    assert_accessible(page, "a safeguarding contact's front page")
    page.goto(server.url + "/admin/licensing/safeguardingalert/")
    assert MESSAGE not in page.content()  # the list shows no content
    shot(page, "safeguarding-01-list")
    assert_accessible(page, "the safeguarding alerts' list")

    link = f"#result_list a[href$='/safeguardingalert/{alert}/change/']"
    tab_to(page, link)
    page.keyboard.press("Enter")
    page.wait_for_selector(".safeguarding-content")
    assert page.inner_text(".safeguarding-content") == MESSAGE
    assert "self-harm: 0.91" in page.inner_text("#content-main")
    shot(page, "safeguarding-02-alert")
    assert_accessible(page, "a safeguarding alert's page")

    tab_to(page, "input[name=decision]")  # a radio group: one stop, the arrows choose
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.is_checked("input[name=decision][value=close]")
    tab_to(page, "#id_new_note")
    page.keyboard.type("Spoke with the student and her parents; support arranged.")
    tab_to(page, "input[name=_save]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#result_list")
    assert "Closed" in page.inner_text("#result_list")
    shot(page, "safeguarding-03-closed")
    assert_accessible(page, "the list after closing")


def test_the_alert_page_in_german(server, page, ids):
    alert, _settings = ids
    page.context.clear_cookies()
    browser_helpers.login(page, server, "sg-kontakt", "sg-Pass-1234")
    page.goto(f"{server.url}/admin/licensing/safeguardingalert/{alert}/change/")
    page.wait_for_selector(".safeguarding-content")
    text = page.inner_text("#content")
    assert "Die beanstandete Nachricht" in text and "Bearbeitung" in text
    assert page.evaluate("document.documentElement.lang") == "de"
    shot(page, "safeguarding-04-alert-de")
    assert_accessible(page, "a safeguarding alert's page in German")


def test_the_admin_switches_alerts_by_keyboard(server, page, ids):
    _alert, settings = ids
    page.context.clear_cookies()
    browser_helpers.login(page, server, "sg-admin", "sg-Pass-1234")
    page.goto(f"{server.url}/admin/licensing/safeguardingsettings/{settings}/change/")
    page.wait_for_selector("#id_retention_days")
    assert_accessible(page, "the safeguarding settings")
    tab_to(page, "#id_retention_days")
    page.keyboard.press("Control+A")
    page.keyboard.type("14")
    tab_to(page, "input[name=_save]")
    page.keyboard.press("Enter")
    page.wait_for_selector(".messagelist")
    shot(page, "safeguarding-05-settings-saved")
    page.goto(server.url + "/admin/licensing/safeguardingalert/")
    assert page.locator("#result_list").count() == 0  # an admin reads no alert

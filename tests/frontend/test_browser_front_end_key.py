"""A front-end key made by an institution admin in the admin, in a real browser (Debian's
chromium, the README's `scripts/run.sh` server): the add form offers the kind and the
institution's courses, the key is shown once with how to give it to Open WebUI, the key list
shows and filters the kind; then two students, named by Open WebUI's header, chat through it
(the openai SDK standing in for Open WebUI) and the course page's per-student usage lists both,
each with their own credits. Screenshots in var/screenshots/front-end-key-*.png."""

from __future__ import annotations

import re

from openai import OpenAI

from tests.browser import BROWSER_TEST, SHOTS, login, pick, shot

pytestmark = BROWSER_TEST

SCHOOL, LICENSE, ADMIN = "Front browser school", "front-browser-students", ("frida", "fr-pass-123")
STUDENTS = ("ana@front-browser.example", "ben@front-browser.example")

# On the README server's database (`manage.py shell -c`): the school's identity provider with
# its student license, two students as their first sign-in leaves them, and the course BIO-7A
# with both as members and a second course.
SETUP = f"""
from licensing.courses.services import course_create, course_member_add
from licensing.models import EndUser, IdentityProvider, License
from licensing.signin.sso import sign_in_complete
lic = License.objects.get(name="{LICENSE}")
idp = IdentityProvider.objects.create(
    institution=lic.institution, issuer="https://idp.front-browser.example", client_id="gw",
    student_groups=["students"], student_license=lic)
bio = course_create(license=lic, name="Biology 7a", code="BIO-7A", allowance=5_000_000)
course_create(license=lic, name="German 7a", code="DE-7A")
for n, email in enumerate({STUDENTS!r}):
    sign_in_complete(provider=idp, claims={{"sub": f"s{{n}}", "email": email,
                                            "email_verified": True, "groups": ["students"]}})
    course_member_add(course=bio, end_user=EndUser.objects.get(user__sso_identity__email=email))
print("COURSE", bio.pk)
"""

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


def test_an_institution_admin_makes_a_front_end_key_and_students_chat(server, page):
    outputs = server.manage_many(
        ("create_license", LICENSE, "--institution", SCHOOL, "--strategy", "per_user"),
        (
            ("create_institution_admin", SCHOOL, ADMIN[0], "--role", "admin", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": ADMIN[1]},
        ),
        ("shell", "-c", SETUP),
    )
    course_id = re.search(r"COURSE (\d+)", outputs[-1]).group(1)
    login(page, server, *ADMIN)

    # The add form: the kind, and the school's courses.
    page.goto(server.url + "/admin/licensing/apikey/add/")
    pick(page, "id_license", LICENSE)
    page.select_option("#id_kind", label="Front-end key")
    courses = page.locator("#id_course option").all_inner_texts()
    assert any("BIO-7A" in c for c in courses) and not any("CS101" in c for c in courses)
    page.fill("#id_name", "Open WebUI")
    shot(page, "front-end-key-1-add-form")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    messages = page.inner_text(".messagelist")
    (key,) = set(KEY_RE.findall(messages))
    assert "ENABLE_FORWARD_USER_INFO_HEADERS=true" in messages
    shot(page, "front-end-key-2-made")

    # The key list: the kind shown, and its filter.
    page.goto(server.url + "/admin/licensing/apikey/?kind__exact=front_end")
    row = page.locator("#result_list tbody tr")
    assert row.count() == 1 and "Front-end key" in row.first.inner_text()
    shot(page, "front-end-key-3-list")

    # Two students chat through it, each named by Open WebUI's header.
    credits = {}
    for email, times in zip(STUDENTS, (2, 1), strict=True):
        sdk = OpenAI(
            api_key=key,
            base_url=server.url + "/v1",
            max_retries=0,
            default_headers={"X-OpenWebUI-User-Email": email},
        )
        credits[email] = 0
        for _ in range(times):
            answer = sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"Hi, I am {email}"}]
            )
            credits[email] += answer.usage.model_extra["credits_used"]

    # The course page's per-student usage lists both, each with their own credits.
    page.goto(server.url + f"/admin/licensing/course/{course_id}/change/")
    usage = page.locator("#course-usage")
    for _ in range(50):  # the ledger's batched writes land just after the answers
        if str(credits[STUDENTS[1]]) in usage.inner_text().replace(",", ""):
            break
        page.wait_for_timeout(200)
        page.reload()
    text = usage.inner_text().replace(",", "")
    for email in STUDENTS:
        line = next(line for line in text.splitlines() if email in line)
        assert str(credits[email]) in line, (email, line)
    usage.screenshot(path=str(SHOTS / "front-end-key-4-course-usage.png"))

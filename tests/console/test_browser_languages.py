"""The admin, the teacher's pages and the student portal in German, in a real browser
(Debian's chromium, the README's `scripts/run.sh` server): every page a school's people use,
asked for by a German browser, shows no English words of ours or Django's, nothing wider than
the window; and the language menu, by keyboard alone, switches an English page to German and
the choice follows the person to another browser. Screenshots: var/screenshots/de-*.png."""

from __future__ import annotations

import re

from tests.browser import BROWSER_TEST, login, shot

pytestmark = BROWSER_TEST

SCHOOL = "Sprachschule am See"
# Run with `manage.py shell -c` on the README server's database (shared by the browser modules:
# a school of this module's own). A German school (its default language, Berlin, euros, terms of
# use), a license whose type allows two chat models, the course DE101 with its teacher and a
# student (a member, with a portal session), an institution admin, and a colleague who has chosen
# no language. Prints the ids and the student's session key.
SETUP = """
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from licensing.access.services import license_create
from licensing.courses.services import course_create, course_member_add
from licensing.models import AdminProfile, CourseTeacher, EndUser, Institution

school, _ = Institution.objects.get_or_create(name="Sprachschule am See")
school.language, school.timezone, school.currency = "de", "Europe/Berlin", "EUR"
school.terms_of_use = "Nur für die Schule nutzen.\\nKeine Daten anderer Personen eingeben."
school.save()
policy = {"version": 1, "services": {
    "chat_completions": {"params": {"model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                                    "max_tokens": {"max": 2000}}},
    "embeddings": {}}}
lic = license_create(name="Klasse 10b", institution=school.name, limit=20_000_000,
                     period="monthly", strategy="per_user", policy=policy)
lic.alert_threshold_percent = 80
lic.save()
course = course_create(license=lic, name="Deutsch als Fremdsprache", code="DE101",
                       allowance=2_000_000, allowance_period="week", pool_limit=10_000_000)
User = get_user_model()
admin = User.objects.create_user("amelie", password="schul-pw-1", is_staff=True,
                                 first_name="Amelie", last_name="Admin")
AdminProfile.objects.create(user=admin, institution=school, role="admin")
colleague = User.objects.create_user("jonas", password="schul-pw-2", is_staff=True)
AdminProfile.objects.create(user=colleague, institution=school, role="admin")
teacher = User.objects.create_user("hilde", password="schul-pw-3", is_staff=True,
                                   first_name="Hilde", last_name="Lehrerin")
AdminProfile.objects.create(user=teacher, institution=school, role="teacher")
CourseTeacher.objects.create(course=course, user=teacher)
student = User.objects.create_user("lena-de", first_name="Lena", last_name="Schmidt")
end_user = EndUser.objects.create(license=lic, user=student, subject="lena-de-sub")
course_member_add(course=course, end_user=end_user)
session = SessionStore()
session[SESSION_KEY] = str(student.pk)
session[BACKEND_SESSION_KEY] = "licensing.signin.backends.GatewayModelBackend"
session[HASH_SESSION_KEY] = student.get_session_auth_hash()
session.create()
print("IDS", school.pk, lic.pk, lic.license_type_id, course.pk, session.session_key)
"""

STORED = """
from licensing.models import AdminProfile
print("STORED", AdminProfile.objects.get(user__username="jonas").language or "-")
"""

GERMAN_BROWSER = {"Accept-Language": "de-DE,de;q=0.9,en;q=0.5"}
ENGLISH_BROWSER = {"Accept-Language": "en-US,en;q=0.9"}
# English that must not be left on a German page: words German never uses, and the labels of our
# pages and Django's admin (whole words, any case: the admin's CSS writes some in capitals; the
# data of this module is German).
ENGLISH = re.compile(
    r"\b(the|and|your|with|this|that|are|you|of|not|from|all|none|"
    r"Usage|Export|Home|Log out|Save|Delete|Search|Add|Change|Language|History|"
    r"Welcome|View site|Requests|Models|Settings|Overview|Sign out|Sign in|Credits per|"
    r"License|Licenses|Transactions|Policy|Providers|Enabled|Allowed|Try it|Windows|"
    r"never|active|revoked|micro-credits|Unlimited|Remaining|Budget used|any|yes|requested)\b",
    re.IGNORECASE,
)


# What a person reads besides the text: placeholders, buttons' values, tooltips, labels for
# screen readers.
ATTRIBUTES = """() => Array.from(document.querySelectorAll(
  "[placeholder], [data-placeholder], input[type=submit], input[type=button], [aria-label], [title]"
)).map(e => [e.getAttribute("placeholder"), e.getAttribute("data-placeholder"),
  ["submit", "button"].includes(e.type) ? e.value : null, e.getAttribute("aria-label"),
  e.getAttribute("title")].filter(Boolean).join(" ")).join(" ")"""
# This module's data that reads as English: license_create names a license type "<name> policy".
DATA = ("Klasse 10b policy",)


# Code a person types or reads as code: a policy document's rule keys (params.model.allowed,
# models.text.allowed),
# the docs' file names (docs/policy.md).
CODE = re.compile(r"(?:params|models)\.[\w.]+|docs/[\w./-]+")


# The page's text less code (the SDK example, rule keys, JSON documents) and scripts.
TEXT = """() => { const body = document.body.cloneNode(true);
  body.querySelectorAll("pre, code, textarea, script, style, template").forEach(e => e.remove());
  return body.textContent; }"""


def english_left(page) -> list[str]:
    text = page.evaluate(TEXT) + " " + page.evaluate(ATTRIBUTES)
    for data in DATA:
        text = text.replace(data, "")
    text = CODE.sub("", text)
    return sorted({m.group(0) for m in ENGLISH.finditer(text)})


def overflow(page) -> int:
    """How far the page is wider than the window (0: nothing sticks out sideways)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def check(page, url: str, name: str, german: str, data: str = "") -> None:
    """The page at `url` is German (`german` on it, none of ENGLISH; the elements `data`
    selects hold records as they were written, such as the audit log's details), fits the
    window, and its screenshot is var/screenshots/de-<name>.png."""
    page.goto(url)
    page.wait_for_selector("#content")
    shot(page, f"de-{name}")
    assert page.get_attribute("html", "lang") == "de", name
    assert german.lower() in page.inner_text("body").lower(), (name, german)
    assert overflow(page) <= 1, f"{name} is {overflow(page)} px wider than the window"
    if data:
        page.eval_on_selector_all(data, "elements => elements.forEach(e => e.remove())")
    left = english_left(page)
    assert not left, f"{name}: English left: {left}"


def _setup(server) -> dict:
    printed = server.manage("shell", "-c", SETUP)
    school, lic, license_type, course, session = re.search(r"IDS (.+)", printed).group(1).split()
    return {
        "school": school,
        "license": lic,
        "license_type": license_type,
        "course": course,
        "session": session,
    }


def test_every_page_in_german(server, page):
    ids = _setup(server)
    base = server.url
    page.set_extra_http_headers(GERMAN_BROWSER)

    # Signed out: the admin's and the portal's sign-in pages.
    check(page, base + "/admin/login/", "admin-login", "Benutzername")
    check(page, base + "/portal/login/", "portal-login", "Melde dich")

    # The institution admin.
    login(page, server, "amelie", "schul-pw-1")
    admin = base + "/admin/"
    check(page, admin, "admin-index", "Lizenzen und Buchungen")
    check(page, admin + "licensing/transaction/", "review", "Zeilen")
    check(page, admin + "licensing/transaction/usage/", "usage", "Credits pro Tag nach Dienst")
    check(page, admin + "licensing/transaction/live/", "live", "Anfragen Ihrer Einrichtung")
    check(page, admin + "my-token/", "my-token", "Sie haben noch kein Token.")
    check(page, admin + "licensing/license/", "licenses", "Klasse 10b")
    check(page, admin + f"licensing/license/{ids['license']}/change/", "license", "Budgetgrenze")
    check(
        page,
        admin + f"licensing/licensetype/{ids['license_type']}/change/",
        "license-type",
        "Eine Anfrage gegen die gespeicherte Richtlinie testen",
    )
    institution = admin + f"licensing/institution/{ids['school']}/change/"
    check(page, institution, "institution", "Sprache")
    check(page, admin + "licensing/colleague/", "colleagues", "amelie")
    audit = admin + "licensing/auditevent/"
    check(page, audit, "audit-log", "Als CSV exportieren", data="td.field-what")
    check(page, admin + f"licensing/course/{ids['course']}/change/", "course-admin", "Kontingent")
    # SCIM provisioning (docs/scim.md): the tokens, and who and which groups were provisioned.
    check(page, admin + "licensing/scimtoken/", "scim-tokens", "SCIM-Token")
    check(page, admin + "licensing/scimtoken/add/", "scim-token-add", "SCIM-Token")
    check(page, admin + "licensing/scimuser/", "scim-users", "SCIM-Benutzer")
    check(page, admin + "licensing/scimgroup/", "scim-groups", "SCIM-Gruppe")
    page.click("#logout-form button")

    # The teacher: the course in the admin and in the portal.
    login(page, server, "hilde", "schul-pw-3")
    course = f"licensing/course/{ids['course']}/change/"
    check(page, admin + course, "teacher-course", "Prüfungsmodus")
    portal_course = base + f"/portal/courses/{ids['course']}/"
    check(page, portal_course, "teacher-portal", "Was Lernende nutzen dürfen")

    # The student: the portal's pages (du, as telli speaks to pupils).
    page.context.clear_cookies()
    page.context.add_cookies([{"name": "sessionid", "value": ids["session"], "url": base}])
    check(page, base + "/portal/", "portal-overview", "Was in diesem Zeitraum übrig ist")
    terms = "Ich habe die Nutzungsbedingungen gelesen"
    check(page, base + "/portal/terms/", "portal-terms", terms)
    page.check("input[name=accept]")
    page.click("input[type=submit][value=Akzeptieren]")
    page.wait_for_selector("#key-form")
    page.fill("#id_name", "Laptop")
    page.click("#key-form input[type=submit]")
    page.wait_for_selector("#new-key")
    assert "Kopiere ihn jetzt" in page.inner_text("#new-key")
    assert not english_left(page), english_left(page)
    shot(page, "de-portal-key-created")
    check(page, base + "/portal/keys/", "portal-keys", "Deine Schlüssel")
    check(page, base + "/portal/data/", "portal-data", "Wer dieses Gateway betreibt")
    check(page, base + f"/portal/courses/{ids['course']}/", "portal-course", "Dein Kontingent")


def test_the_language_menu_by_keyboard_and_the_choice_follows_the_person(server, page):
    """An admin whose browser asks for English (which beats the school's German default) picks
    Deutsch with the keyboard alone: the page is German, and stays German in a fresh browser."""
    browser = page.context.browser
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_extra_http_headers(ENGLISH_BROWSER)
    english = context.new_page()
    login(english, server, "jonas", "schul-pw-2")
    assert english.get_attribute("html", "lang") == "en"
    assert "log out" in english.inner_text("#user-tools").lower()

    # Tab from the top of the page to the menu, choose by typing, Tab to its button, Enter.
    english.keyboard.press("Tab")
    for _ in range(15):
        if english.evaluate("document.activeElement.id") == "language-select":
            break
        english.keyboard.press("Tab")
    assert english.evaluate("document.activeElement.id") == "language-select"
    outline = english.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # focus is visible
    shot(english, "language-menu-focused")
    english.keyboard.type("Deutsch")
    assert english.evaluate("document.activeElement.value") == "de"
    english.keyboard.press("Tab")
    assert english.evaluate("document.activeElement.id") == "language-submit"
    with english.expect_navigation():
        english.keyboard.press("Enter")
    assert english.get_attribute("html", "lang") == "de"
    assert "abmelden" in english.inner_text("#user-tools").lower()
    assert english.eval_on_selector("#language-select", "e => e.value") == "de"
    shot(english, "language-menu-german")
    assert "STORED de" in server.manage("shell", "-c", STORED)
    context.close()

    # Another browser, English again, no cookie: the stored choice follows jonas.
    fresh = browser.new_context(viewport={"width": 1440, "height": 900})
    fresh.set_extra_http_headers(ENGLISH_BROWSER)
    other = fresh.new_page()
    login(other, server, "jonas", "schul-pw-2")
    assert other.get_attribute("html", "lang") == "de"
    fresh.close()

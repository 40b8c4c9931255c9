"""The pages' language (docs/languages.md): a person's own choice (the menu: its cookie, and
stored on their profile so that it follows them), else their browser's Accept-Language if it
names a language the gateway speaks, else their institution's default, else LANGUAGE_CODE;
hostile cookies, headers and form values change nothing; the management API stays English;
e-mails go out in the recipient's language."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote_from_bytes

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from core.languages import browser_language, supported_language
from licensing.access.colleagues import invitation_send
from licensing.access.services import license_create
from licensing.ledger.alerts import send_budget_alert
from licensing.models import AdminProfile, BudgetAlert, EndUser, Institution

pytestmark = pytest.mark.django_db

User = get_user_model()
COOKIE = settings.LANGUAGE_COOKIE_NAME
PORTAL = "/portal/"
ADMIN = "/admin/"
# Values a cookie, a header or a form may carry: none names a language, none may cost a 500.
HOSTILE = [
    "de\x00",
    "\x00",
    "de\ud800",
    "\ud800",
    "d" * 10_000,
    "de-" + "a" * 10_000,
    "de-DE;q=1e400",
    "de;q=1e400",
    "de;q=2",
    "../../etc/passwd",
    "de_DE",
    "fr",
    "",
]


@pytest.fixture
def school(db):
    lic = license_create(
        name="Klasse 9", institution="Schule am See", limit=1_000_000, period="monthly",
        strategy="per_user",
    )  # fmt: skip
    return lic


def staff(name: str, institution: Institution, *, role: str = "admin", language: str = ""):
    user = User.objects.create_user(name, email=f"{name}@school.test", is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role, language=language)
    return user


def student(name: str, lic, *, language: str = ""):
    user = User.objects.create_user(name, email=f"{name}@school.test")
    EndUser.objects.create(license=lic, user=user, subject=f"{name}-sub", language=language)
    return user


def page_language(response) -> str:
    """The language a page was rendered in: its Content-Language header (LocaleMiddleware)."""
    assert response.status_code == 200, response.status_code
    return response["Content-Language"]


def on_the_wire(value: str) -> str:
    """A header as a server hands it to Django: its bytes read as latin-1 (ASGI, WSGI). A lone
    surrogate arrives as the bytes a client could send for it, never as itself."""
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


def get(client: Client, path: str, *, browser: str | None = None, cookie: str | None = None):
    if cookie is not None:
        client.cookies[COOKIE] = on_the_wire(cookie)
    headers = {} if browser is None else {"Accept-Language": on_the_wire(browser)}
    return client.get(path, headers=headers)


def post_form(client: Client, path: str, fields: dict[str, str]):
    """A form posted as bytes, whatever they hold (a lone surrogate as a client could send)."""
    body = "&".join(
        f"{name}={quote_from_bytes(value.encode('utf-8', 'surrogatepass'))}"
        for name, value in fields.items()
    )
    return client.post(path, body, content_type="application/x-www-form-urlencoded")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the sources, in order --------------------------------------------------------------------


def test_a_page_is_in_the_browsers_language_when_the_gateway_speaks_it():
    login = "/admin/login/"
    german = get(Client(), login, browser="de-DE,de;q=0.9,en;q=0.5")
    assert page_language(german) == "de"
    assert '<html lang="de"' in german.text and "Anmelden" in german.text
    assert "Accept-Language" in german["Vary"]
    assert page_language(get(Client(), login, browser="fr-FR,fr;q=0.9")) == "en"  # none shipped
    assert page_language(get(Client(), login, browser="fr-FR,de;q=0.5")) == "de"  # the next one
    assert page_language(get(Client(), login)) == settings.LANGUAGE_CODE


def test_the_cookie_beats_the_browser_for_someone_not_signed_in():
    assert page_language(get(Client(), "/admin/login/", browser="de", cookie="en")) == "en"
    assert page_language(get(Client(), "/admin/login/", browser="en", cookie="de")) == "de"


def test_the_institutions_default_when_the_browser_names_no_language_we_speak(school):
    school.institution.language = "de"
    school.institution.save()
    head = signed_in(staff("head", school.institution))
    assert page_language(get(head, ADMIN)) == "de"
    assert page_language(get(head, ADMIN, browser="fr, it;q=0.5")) == "de"
    assert page_language(get(head, ADMIN, browser="en-GB")) == "en"  # the browser comes first
    pupil = signed_in(student("lena", school))
    dashboard = get(pupil, PORTAL)
    assert page_language(dashboard) == "de"
    assert "Was in diesem Zeitraum übrig ist (Monat)" in dashboard.text


def test_the_persons_own_choice_beats_their_browser_and_their_cookie(school):
    head = signed_in(staff("head", school.institution, language="de"))
    assert page_language(get(head, ADMIN, browser="en-US", cookie="en")) == "de"
    pupil = signed_in(student("lena", school, language="de"))
    assert page_language(get(pupil, PORTAL, browser="en-US")) == "de"


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_cookie_or_header_is_no_language(school, value):
    school.institution.language = "de"
    school.institution.save()
    anonymous = get(Client(), "/admin/login/", browser=value, cookie=value)
    assert page_language(anonymous) == "en"
    head = signed_in(staff("head", school.institution))
    assert page_language(get(head, ADMIN, browser=value, cookie=value)) == "de"  # the school's
    # A stored value the gateway does not speak (a language whose catalogue was dropped).
    if "\x00" not in value and "\ud800" not in value:  # neither can be stored
        AdminProfile.objects.filter(user__username="head").update(language=value[:16])
        assert page_language(get(head, ADMIN, browser=value)) == "de"


def test_the_checks_on_their_own():
    assert supported_language("de") == "de" and supported_language("de-AT") == "de"
    assert supported_language("EN") == "en"
    for value in [*HOSTILE, None, 7, b"de", ["de"]]:
        assert supported_language(value) is None, repr(value)
    assert browser_language("fr;q=0.9, de-CH;q=0.8") == "de"
    assert browser_language("*, de") is None
    for value in HOSTILE:
        assert browser_language(value) is None, repr(value)


# --- the menu ------------------------------------------------------------------------------------


def test_the_menu_sets_the_cookie_and_stores_the_choice_on_every_profile(school):
    other = license_create(name="AG Robotik", institution="Schule am See", limit=None)
    user = student("lena", school)
    EndUser.objects.create(license=other, user=user, subject="lena-robotik")
    client = signed_in(user)
    response = client.post("/language/", {"language": "de", "next": "/portal/keys/"})
    assert response.status_code == 302 and response["Location"] == "/portal/keys/"
    cookie = response.cookies[COOKIE]
    assert cookie.value == "de" and cookie["httponly"] and cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) == settings.LANGUAGE_COOKIE_AGE
    assert set(EndUser.objects.filter(user=user).values_list("language", flat=True)) == {"de"}
    # It follows them: another browser, no cookie, an English browser.
    assert page_language(get(signed_in(user), PORTAL, browser="en-US")) == "de"


def test_a_staff_users_choice_is_stored_on_their_profile(school):
    head = staff("head", school.institution)
    response = signed_in(head).post("/language/", {"language": "de-AT", "next": "/admin/"})
    assert response.status_code == 302 and response.cookies[COOKIE].value == "de"
    assert AdminProfile.objects.get(user=head).language == "de"


def test_someone_not_signed_in_gets_the_cookie_alone(school):
    response = Client().post("/language/", {"language": "de", "next": "/admin/login/"})
    assert response.status_code == 302 and response.cookies[COOKIE].value == "de"
    assert not AdminProfile.objects.exclude(language="").exists()
    assert not EndUser.objects.exclude(language="").exists()


@pytest.mark.parametrize("value", [*HOSTILE, "xx"])
def test_a_hostile_or_unknown_language_is_a_400_and_stores_nothing(school, value):
    head = staff("head", school.institution)
    response = post_form(signed_in(head), "/language/", {"language": value, "next": "/admin/"})
    assert response.status_code == 400
    assert response.content == b"Unknown language."
    assert COOKIE not in response.cookies
    assert AdminProfile.objects.get(user=head).language == ""


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/", "//evil.example/admin/", "javascript:alert(1)", "\x00", "", "/\\x"],
)
def test_the_menu_goes_back_only_to_a_page_of_this_site(target):
    response = post_form(Client(), "/language/", {"language": "de", "next": target})
    assert response.status_code == 302 and response["Location"] == "/"


def test_the_menu_takes_a_post_with_its_csrf_token_only():
    assert Client().get("/language/?language=de").status_code == 405
    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/language/", {"language": "de"}).status_code == 403
    page = strict.get("/admin/login/")
    token = page.cookies["csrftoken"].value
    response = strict.post("/language/", {"language": "de", "csrfmiddlewaretoken": token})
    assert response.status_code == 302


def test_every_page_shows_the_menu_with_the_current_language_chosen(school):
    head = signed_in(staff("head", school.institution, language="de"))
    for client, path in ((head, ADMIN), (Client(), "/admin/login/"), (Client(), "/portal/login/")):
        text = get(client, path).text
        assert 'id="language-select"' in text and 'action="/language/"' in text, path
    text = get(head, ADMIN).text
    assert '<option value="de" lang="de" selected>Deutsch</option>' in text


# --- what stays English ----------------------------------------------------------------------


def test_the_management_api_answers_in_english_whatever_is_chosen(school):
    head = signed_in(staff("head", school.institution, language="de"))
    response = head.get("/manage/v1/licenses", headers={"Accept-Language": "de"})
    assert response.status_code == 200 and response["Content-Language"] == "en"
    unauthenticated = Client().get("/manage/v1/licenses", headers={"Accept-Language": "de"})
    assert unauthenticated.status_code == 401
    assert "Authentication credentials were not provided." in unauthenticated.text


# --- the e-mails, in the recipient's language ---------------------------------------------


def test_the_budget_alert_goes_out_in_each_admins_language(school):
    staff("head", school.institution, language="de")
    staff("deputy", school.institution)  # no choice: the institution's, then the gateway's
    staff("reviewer", school.institution, role="reviewer", language="de")  # not an admin
    alert = BudgetAlert.objects.create(
        license=school, period="monthly", window_start=datetime(2026, 3, 1, tzinfo=UTC),
        holder="license", spent=800_000, threshold=800_000, limit=1_000_000,
    )  # fmt: skip
    mail.outbox.clear()
    send_budget_alert(alert.pk)
    sent = {tuple(m.to): m for m in mail.outbox}
    assert set(sent) == {("head@school.test",), ("deputy@school.test",)}
    german = sent[("head@school.test",)]
    assert german.subject == "[Inference Gateway] Lizenz Klasse 9 hat 80 % ihres Budgets erreicht"
    assert "hat 800.000 von 1.000.000 Mikro-Credits in dem Zeitraum (monatlich)" in german.body
    assert "ab 2026-03-01 (UTC)" in german.body  # the day in the institution's time zone
    english = sent[("deputy@school.test",)]
    assert english.subject == "[Inference Gateway] License Klasse 9 reached 80% of its budget"
    assert "in the monthly window from 2026-03-01 (UTC)" in english.body
    alert.refresh_from_db()
    assert alert.recipients == ["deputy@school.test", "head@school.test"]


def test_one_message_when_every_admin_reads_the_same_language(school):
    school.institution.language = "de"
    school.institution.save()
    staff("head", school.institution)
    staff("deputy", school.institution, language="de")
    alert = BudgetAlert.objects.create(
        license=school, period="lifetime", window_start=datetime(2026, 3, 1, tzinfo=UTC),
        holder="user:7", spent=900_000, threshold=800_000, limit=1_000_000,
    )  # fmt: skip
    mail.outbox.clear()
    send_budget_alert(alert.pk)
    [message] = mail.outbox
    assert sorted(message.to) == ["deputy@school.test", "head@school.test"]
    assert "(Budgetkonto user:7)" in message.body and "ihrem Budget für die gesamte" in message.body


def test_the_invitation_is_in_the_colleagues_institutions_language(school):
    school.institution.language = "de"
    school.institution.save()
    inviter = staff("head", school.institution)
    colleague = staff("new", school.institution)
    mail.outbox.clear()
    assert invitation_send(user=colleague, link="https://gw.example/x/", inviter=inviter)
    [message] = mail.outbox
    assert message.subject == "Ihr Zugang zum Inference Gateway"
    assert "head hat Sie als new in die Verwaltung" in message.body
    assert "https://gw.example/x/" in message.body


# --- the institution's default in its form -------------------------------------------------


def test_the_institutions_language_is_chosen_from_the_languages_shipped(school):
    from licensing.console.forms import InstitutionForm

    institution = school.institution
    data = {"name": institution.name, "portal_key_limit": 5, "terms_of_use": "", "currency": ""}
    data["timezone"] = "Europe/Berlin"  # the form asks for it too (issue 37's time zones)
    form = InstitutionForm(data={**data, "language": "de"}, instance=institution)
    assert form.is_valid(), form.errors
    form.save()
    assert Institution.objects.get(pk=institution.pk).language == "de"
    choices = [value for value, _label in InstitutionForm().fields["language"].choices]
    assert choices == ["", "en", "de"]
    for value in ("fr", "de\x00", "d" * 10_000, "\ud800"):
        form = InstitutionForm(data={**data, "language": value}, instance=institution)
        assert not form.is_valid() and "language" in form.errors, repr(value)

"""The admin without code names, ids or JSON (issue 37 item 5), through the Django test client:
people found and shown by name and e-mail (scoped autocompletes; hostile terms and another
institution's ids), budgets entered and shown in the institution's money (exact conversion,
hostile amounts), the course page linked, the dashboard, and the small faults (the live feed's
names, a license with history, where an invitation's mail went, plurals, the model filter)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core import clock
from licensing.console.live import HolderNames
from licensing.console.money import to_micro_credits
from licensing.courses.services import course_create
from licensing.models import (
    AdminProfile,
    ApiKey,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    IdentityProvider,
    License,
    LtiIdentity,
    LtiLaunchState,
    LtiPlatform,
    SsoIdentity,
    Transaction,
)
from licensing.rules.money import Rate

from .test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

User = get_user_model()


def _staff(username: str, institution, role: str, **names) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True, **names)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    client = Client()
    client.force_login(user)
    return client


def _student(found: dict, subject: str, first: str, last: str, email: str) -> EndUser:
    user = User.objects.create_user(subject, first_name=first, last_name=last, email=email)
    return EndUser.objects.create(license=found["license"], user=user, subject=subject)


@pytest.fixture
def schools():
    """Two institutions: a (EUR at 2,000,000 a unit, Berlin) with a course and two named
    students, and b with a student named like one of a's."""
    a, b = make_licensing("a"), make_licensing("b")
    institution = a["institution"]
    institution.currency, institution.micro_credits_per_currency_unit = "EUR", 2_000_000
    institution.timezone = "Europe/Berlin"
    institution.save()
    a["ada"] = _student(a, "stu-1001", "Ada", "Lovelace", "ada@school-a.example")
    a["alan"] = _student(a, "stu-1002", "Alan", "Turing", "alan@school-a.example")
    b["ada"] = _student(b, "stu-9001", "Ada", "Elsewhere", "ada@school-b.example")
    a["course"] = course_create(license=a["license"], name="Intro", code="CS101")
    a["admin"] = _staff("alice", institution, "admin", first_name="Alice", last_name="Admin")
    return {"a": a, "b": b}


def _people(client, path: str, **params):
    response = client.get(path, params)
    return response.status_code, response.json()


# --- people by name and e-mail ------------------------------------------------------------


def test_course_members_are_found_by_name_and_email_in_the_institution_only(schools):
    a, b = schools["a"], schools["b"]
    students = reverse("admin:licensing_course_people", args=[a["course"].pk, "students"])
    status, found = _people(a["admin"], students, term="ada")
    assert status == 200
    assert [r["text"] for r in found["results"]] == ["Ada Lovelace (ada@school-a.example)"]
    assert found["results"][0]["id"] == str(a["ada"].pk)
    # By part of the e-mail, by first and last name together, any case.
    _, found = _people(a["admin"], students, term="ALAN@school")
    assert [r["id"] for r in found["results"]] == [str(a["alan"].pk)]
    _, found = _people(a["admin"], students, term="ada love")
    assert [r["id"] for r in found["results"]] == [str(a["ada"].pk)]
    # Another institution's person is never offered: by name, e-mail, subject or id.
    for term in ("Elsewhere", "school-b", "stu-9001", str(b["ada"].pk)):
        _, found = _people(a["admin"], students, term=term)
        assert found["results"] == [], term
    # Hostile terms and pages: a 400 with a reason, never a 500.
    for params in (
        {"term": "a\x00"},
        {"term": "x" * 10_000},
        {"page": str(2**64)},
        {"page": "-1"},
        {"page": "1e400"},
    ):
        status, body = _people(a["admin"], students, **params)
        assert status == 400 and body["error"], params
    # A lone surrogate cannot be sent in a URL: its bytes arrive as replacement characters.
    assert a["admin"].get(students + "?term=%ED%A0%80").status_code == 200


def test_the_people_endpoints_refuse_other_institutions_and_teachers(schools):
    a, b = schools["a"], schools["b"]
    elsewhere = course_create(license=b["license"], name="B", code="B1")
    other = reverse("admin:licensing_course_people", args=[elsewhere.pk, "students"])
    assert a["admin"].get(other, {"term": "ada"}).status_code == 404
    for hostile in (str(2**64), "-1", "abc"):
        path = f"/admin/licensing/course/{hostile}/people/students/"
        assert a["admin"].get(path).status_code == 404, hostile
    unknown = reverse("admin:licensing_course_people", args=[a["course"].pk, "wallets"])
    assert a["admin"].get(unknown).status_code == 404
    teacher = _staff("grace", a["institution"], "teacher")
    CourseTeacher.objects.create(course=a["course"], user=User.objects.get(username="grace"))
    students = reverse("admin:licensing_course_people", args=[a["course"].pk, "students"])
    assert teacher.get(students).status_code == 403  # teachers do not add members here
    reviewer = _staff("rita", a["institution"], "reviewer")
    assert reviewer.get(students).status_code == 404


def test_teachers_are_found_among_the_institutions_staff(schools):
    a, b = schools["a"], schools["b"]
    _staff("grace", a["institution"], "teacher", first_name="Grace", last_name="Hopper")
    _staff("grace-b", b["institution"], "teacher", first_name="Grace", last_name="Other")
    teachers = reverse("admin:licensing_course_people", args=[a["course"].pk, "teachers"])
    _, found = _people(a["admin"], teachers, term="grace")
    assert [r["text"] for r in found["results"]] == ["Grace Hopper"]


def test_members_and_teachers_are_added_by_the_autocompletes_choice(schools):
    a, b = schools["a"], schools["b"]
    course = a["course"]
    page = a["admin"].get(url(Course, "change", course.pk))
    body = page.content.decode()
    # Autocompletes (select2) asking our endpoints, not raw id fields.
    assert 'class="vForeignKeyRawIdAdminField"' not in body
    assert reverse("admin:licensing_course_people", args=[course.pk, "students"]) in body
    assert reverse("admin:licensing_course_people", args=[course.pk, "teachers"]) in body
    data = form_data(page)
    data.update(
        {
            "members-TOTAL_FORMS": "1",
            "members-0-end_user": str(a["ada"].pk),
            "members-0-top_up": "0",
            "teachers-TOTAL_FORMS": "1",
            "teachers-0-user": str(User.objects.get(username="alice").pk),
        }
    )
    answer = a["admin"].post(url(Course, "change", course.pk), data)
    assert answer.status_code == 302, answer.context and answer.context["inline_admin_formsets"]
    assert list(CourseMember.objects.filter(course=course).values_list("end_user", flat=True)) == [
        a["ada"].pk
    ]
    # The member's row names the person, not the subject.
    page = a["admin"].get(url(Course, "change", course.pk)).content.decode()
    assert "Ada Lovelace (ada@school-a.example)" in page
    # Another institution's end user or staff posted by id: a form error, nothing saved.
    data = form_data(a["admin"].get(url(Course, "change", course.pk)))
    for field, value in (
        ("members-1-end_user", b["ada"].pk),
        ("teachers-1-user", User.objects.get(username="alice").pk + 10_000),
    ):
        forged = {**data, field: str(value)}
        forged["members-TOTAL_FORMS"] = "2" if field.startswith("members") else "1"
        forged["teachers-TOTAL_FORMS"] = "2" if field.startswith("teachers") else "1"
        if field.startswith("members"):
            forged["members-1-top_up"] = "0"
        answer = a["admin"].post(url(Course, "change", course.pk), forged)
        assert answer.status_code == 200 and "Select a valid choice" in answer.content.decode()
    assert CourseMember.objects.filter(course=course).count() == 1
    assert CourseTeacher.objects.filter(course=course).count() == 1


def test_end_users_are_listed_and_searched_by_name_and_email(schools):
    a = schools["a"]
    listing = a["admin"].get(url(EndUser, "changelist")).content.decode()
    assert "Ada Lovelace" in listing and "ada@school-a.example" in listing
    assert "Elsewhere" not in listing
    found = a["admin"].get(url(EndUser, "changelist"), {"q": "turing"})
    assert [obj.pk for obj in found.context["cl"].result_list] == [a["alan"].pk]
    # The review page's end-user filter names and finds people the same way.
    choices = reverse("admin:licensing_transaction_choices", args=["end_user"])
    _, offered = _people(a["admin"], choices, term="lovelace")
    assert [r["text"] for r in offered["results"]] == [
        "Ada Lovelace (ada@school-a.example) (license-a)"
    ]


def test_a_key_for_a_student_is_made_by_name(schools):
    a, b = schools["a"], schools["b"]
    people = reverse("admin:licensing_apikey_people")
    _, found = _people(a["admin"], people, term="ada")
    assert [r["text"] for r in found["results"]] == [
        "Ada Lovelace (ada@school-a.example) (license-a)"
    ]
    data = form_data(a["admin"].get(url(ApiKey, "add")))
    data.update(license=str(a["license"].pk), end_user=str(a["ada"].pk), name="lab")
    answer = a["admin"].post(url(ApiKey, "add"), data)
    assert answer.status_code == 302
    key = ApiKey.objects.get(name="lab")
    assert key.end_user_id == a["ada"].pk and key.license_id == a["license"].pk
    page = a["admin"].get(url(ApiKey, "change", key.pk)).content.decode()
    assert "Ada Lovelace (ada@school-a.example)" in page
    # Another institution's end user: not a choice; a student of another license: refused.
    data.update(end_user=str(b["ada"].pk), name="forged")
    assert a["admin"].post(url(ApiKey, "add"), data).status_code == 200
    other_license = License.objects.create(
        institution=a["institution"], license_type=a["license"].license_type, name="other-a"
    )
    data.update(license=str(other_license.pk), end_user=str(a["ada"].pk))
    answer = a["admin"].post(url(ApiKey, "add"), data)
    assert answer.status_code == 200 and "not on this key" in answer.content.decode()
    assert not ApiKey.objects.filter(name="forged").exists()


# --- budgets in money -----------------------------------------------------------------------


def test_budget_amounts_convert_exactly():
    eur = Rate("EUR", 1_000_000)
    assert to_micro_credits(Decimal("0.01"), eur) == 10_000
    assert to_micro_credits(Decimal("12.5"), eur) == 12_500_000
    assert to_micro_credits(Decimal("9223372036854.775807"), eur) == 2**63 - 1
    assert to_micro_credits(Decimal("0.000001"), Rate("X", 10**12)) == 1_000_000
    for hostile in ("-0.01", "1e400", "9223372036854.775808", "1e999999", "1e-999999", "0.0000001"):
        with pytest.raises(Exception) as caught:
            to_micro_credits(Decimal(hostile), eur)
        assert type(caught.value).__name__ == "ValidationError", hostile


def test_the_license_budget_is_entered_and_shown_in_the_institutions_money(schools):
    a = schools["a"]
    lic = a["license"]  # 1,000,000 micro-credits at 2,000,000 a euro
    change = url(License, "change", lic.pk)
    page = a["admin"].get(change)
    data = form_data(page)
    assert data["budget_limit"] == "0.50"
    assert "In EUR: 1 EUR = 2,000,000 micro-credits." in page.content.decode()
    # Saved untouched, the stored micro-credits stay exactly.
    assert a["admin"].post(change, data).status_code == 302
    lic.refresh_from_db()
    assert lic.budget_limit == 1_000_000
    for amount, micro in (("0.01", 20_000), ("12.5", 25_000_000), ("0.0000005", 1)):
        assert a["admin"].post(change, {**data, "budget_limit": amount}).status_code == 302
        lic.refresh_from_db()
        assert lic.budget_limit == micro, amount
    for hostile in ("1e400", "-1", "\x00", "abc", "NaN", "Infinity", "0.00000001", "9" * 41):
        answer = a["admin"].post(change, {**data, "budget_limit": hostile})
        assert answer.status_code == 200, hostile
        assert answer.context["adminform"].form.errors["budget_limit"], hostile
    lic.refresh_from_db()
    assert lic.budget_limit == 1  # unchanged by every refused amount
    listing = a["admin"].get(url(License, "changelist")).content.decode()
    assert "0.0000 EUR (1 micro-credits) monthly per holder" in listing


def test_the_course_add_form_shows_the_institutions_currency(schools):
    """The issue: "the course add form shows USD for a EUR institution"."""
    a = schools["a"]
    page = a["admin"].get(url(Course, "add")).content.decode()
    assert "In EUR: 1 EUR = 2,000,000 micro-credits." in page and "USD" not in page
    data = form_data(a["admin"].get(url(Course, "add")))
    data.update(license=str(a["license"].pk), code="NEW", name="New", allowance="1.25")
    data["pool_limit"] = "10"
    assert a["admin"].post(url(Course, "add"), data).status_code == 302
    course = Course.objects.get(code="NEW")
    assert (course.allowance, course.pool_limit) == (2_500_000, 20_000_000)
    # A superuser sees every institution: the currency follows the license chosen.
    superuser = Client()
    superuser.force_login(User.objects.create_superuser("root", password="pw"))
    page = superuser.get(url(Course, "add")).content.decode()
    assert "the chosen license" in page
    # licensing/money.js shows the chosen license's currency beside the amount.
    assert 'data-currency-from="id_license"' in page and "licensing/money.js" in page
    assert f"&quot;{a['license'].pk}&quot;: &quot;EUR&quot;" in page
    assert f"&quot;{schools['b']['license'].pk}&quot;: &quot;USD&quot;" in page
    data.update(code="NEW2", allowance="1")
    assert superuser.post(url(Course, "add"), data).status_code == 302
    assert Course.objects.get(code="NEW2").allowance == 2_000_000  # EUR's rate, not USD's


def test_a_top_up_is_entered_in_money(schools):
    a = schools["a"]
    course = a["course"]
    CourseMember.objects.create(course=course, end_user=a["ada"])
    data = form_data(a["admin"].get(url(Course, "change", course.pk)))
    data["members-0-top_up"] = "0.25"
    data["members-0-top_up_window_start_0"] = "2026-03-09"
    data["members-0-top_up_window_start_1"] = "00:00:00"
    answer = a["admin"].post(url(Course, "change", course.pk), data)
    assert answer.status_code == 302, answer.context and answer.context["inline_admin_formsets"]
    assert CourseMember.objects.get(course=course).top_up == 500_000
    data = form_data(a["admin"].get(url(Course, "change", course.pk)))
    assert data["members-0-top_up"] == "0.25"
    for hostile in ("1e400", "-0.5", "\x00"):
        answer = a["admin"].post(
            url(Course, "change", course.pk), {**data, "members-0-top_up": hostile}
        )
        assert answer.status_code == 200, hostile
    assert CourseMember.objects.get(course=course).top_up == 500_000


# --- the course page linked, the dashboard --------------------------------------------------


def test_the_course_page_is_linked_from_the_admin_and_the_teachers_index(schools):
    a = schools["a"]
    course = a["course"]
    portal = reverse("portal:course", args=[course.pk])
    assert portal in a["admin"].get(url(Course, "change", course.pk)).content.decode()
    assert portal in a["admin"].get(url(Course, "changelist")).content.decode()
    teacher = _staff("grace", a["institution"], "teacher")
    CourseTeacher.objects.create(course=course, user=User.objects.get(username="grace"))
    index = teacher.get(reverse("admin:index")).content.decode()
    assert 'id="dashboard-courses"' in index and portal in index and "CS101" in index
    assert teacher.get(portal).status_code == 200  # the teacher's page opens for them


def test_the_dashboard_greets_an_institution_admin_with_the_checklist(schools):
    a = schools["a"]
    institution = a["institution"]
    LtiPlatform.objects.filter(institution=institution).update(active=False)  # not set up yet
    # A charge at 23:30 UTC on 31 October is 1 November in Berlin: this month's, there.
    Transaction.objects.filter(license__institution=institution).update(
        created_at=datetime(2026, 10, 31, 23, 30, tzinfo=UTC), credits=3_000_000
    )
    with clock.frozen(datetime(2026, 11, 15, 12, tzinfo=UTC).timestamp()):
        page = a["admin"].get(reverse("admin:index"))
    context, body = page.context, page.content.decode()
    summary = context["dashboard_summary"]
    rows = Transaction.objects.filter(license__institution=institution).count()
    assert summary.month == "November 2026 (Europe/Berlin)"
    assert summary.spend == f"{rows * 1.5:.2f} EUR ({rows * 3_000_000:,} micro-credits)"
    steps = {step.key: step.done for step in summary.steps}
    assert steps == {"sign_in": False, "provider": False, "license": True, "course": True}
    assert reverse("admin:licensing_ltiplatform_add") in body  # what an admin can do
    assert reverse("admin:catalog_connection_add") not in body  # the operator's
    # Another institution's spend is not in it.
    assert "Institution b" not in body
    IdentityProvider.objects.create(
        institution=institution, issuer="https://idp.example", client_id="c"
    )
    page = a["admin"].get(reverse("admin:index"))
    assert {s.key: s.done for s in page.context["dashboard_summary"].steps}["sign_in"] is True


def test_the_superuser_dashboard_costs_the_same_queries_for_more_institutions(
    schools, admin_client
):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse("admin:index")).status_code == 200
        return len(captured.captured_queries)

    before = queries()
    for suffix in ("c", "d", "e"):
        make_licensing(suffix)
    assert queries() == before


def test_a_superuser_sees_every_institution_and_a_reviewer_the_spend(schools, admin_client):
    page = admin_client.get(reverse("admin:index"))
    names = [row.institution.name for row in page.context["dashboard_rows"]]
    assert names == ["Institution a", "Institution b"]
    assert 'id="dashboard-institutions"' in page.content.decode()
    reviewer = _staff("rita", schools["a"]["institution"], "reviewer")
    page = reviewer.get(reverse("admin:index"))
    assert page.context["dashboard"] == "reviewer" and 'id="month-spend"' in page.content.decode()


# --- the small faults -----------------------------------------------------------------------


def test_the_live_feed_names_the_key_and_the_person(schools):
    a = schools["a"]
    key = ApiKey.objects.get(license=a["license"])
    events = [
        {"api_key_id": key.pk, "end_user_id": a["ada"].pk},
        {"api_key_id": None, "end_user_id": a["alan"].pk},
        {"api_key_id": None, "end_user_id": None},
    ]
    named = HolderNames().name(events)
    assert [e["holder"] for e in named] == [
        "Ada Lovelace (ada@school-a.example) · key key a",
        "Alan Turing (alan@school-a.example)",
        "-",
    ]
    Transaction.objects.filter(license=a["license"]).update(end_user=a["ada"])
    page = a["admin"].get(reverse("admin:licensing_transaction_live")).content.decode()
    assert "Ada Lovelace (ada@school-a.example) · key key a" in page
    assert "key " + str(key.pk) + "<" not in page


def test_a_license_with_history_says_why_it_stays_and_what_to_do(schools):
    a = schools["a"]
    lic = a["license"]
    delete = url(License, "delete", lic.pk)
    page = a["admin"].get(delete)
    body = page.content.decode()
    assert page.status_code == 403
    assert "cannot be deleted" in body and "ledger rows point at this license" in body
    assert "Deactivate it instead" in body and "permission" not in body.lower()
    assert a["admin"].post(delete, {"post": "yes"}).status_code == 403
    assert License.objects.filter(pk=lic.pk).exists()
    change = a["admin"].get(url(License, "change", lic.pk)).content.decode()
    assert 'id="kept-for-ledger-note"' in change
    # Another institution's license: still a 404.
    assert a["admin"].get(url(License, "delete", schools["b"]["license"].pk)).status_code == 404
    # Without history it is deleted as before.
    unused = License.objects.create(
        institution=a["institution"], license_type=lic.license_type, name="unused"
    )
    assert a["admin"].post(url(License, "delete", unused.pk), {"post": "yes"}).status_code == 302
    assert not License.objects.filter(pk=unused.pk).exists()


def test_an_invitation_says_where_its_mail_went(schools, settings):
    a = schools["a"]
    add = url(get_user_model()._meta.apps.get_model("licensing", "Colleague"), "add")
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    answer = a["admin"].post(
        add, {"username": "bob", "email": "bob@school-a.example", "role": "reviewer"}, follow=True
    )
    said = " ".join(str(m) for m in answer.context["messages"])
    assert "It was not e-mailed to bob@school-a.example" in said and "to its log" in said
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.EMAIL_BACKEND = "tests.console.test_admin_without_ids.DeliveringBackend"
    answer = a["admin"].post(
        add,
        {"username": "carol", "email": "carol@school-a.example", "role": "reviewer"},
        follow=True,
    )
    said = " ".join(str(m) for m in answer.context["messages"])
    assert "It was e-mailed to carol@school-a.example." in said
    assert DeliveringBackend.sent == ["carol@school-a.example"]


class DeliveringBackend(LocmemBackend):
    """A backend that hands mail on (as SMTP would), for the message's wording."""

    sent: list[str] = []

    def send_messages(self, messages):
        DeliveringBackend.sent.extend(to for m in messages for to in m.to)
        return len(messages)


def test_the_admin_says_identities_and_launches(admin_client):
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert "SSO identities" in index and "Sso identitys" not in index
    assert "LTI launches" not in index  # not in the menu; named right where it is listed
    assert str(SsoIdentity._meta.verbose_name_plural) == "SSO identities"
    assert str(LtiLaunchState._meta.verbose_name_plural) == "LTI launches"
    assert str(IdentityProvider._meta.verbose_name_plural) == "identity providers (SSO)"
    assert LtiPlatform._meta.verbose_name_plural == "LTI platforms"
    assert LtiIdentity._meta.verbose_name_plural == "LTI identities"


def test_the_model_filter_finds_any_case_and_part(schools, admin_client):
    from catalog.models import Model, Provider

    provider = Provider.objects.create(slug="p", kind="openai", description="")
    for name in ("gpt-4o", "gpt-4o-mini", "o3"):
        Model.objects.create(
            model_id=name, owned_by=provider, supported_features=["chat_completions"]
        )
    lic = schools["a"]["license"]
    for i, name in enumerate(("gpt-4o", "gpt-4o-mini", "o3", "Not-In-Catalog")):
        Transaction.objects.create(
            request_id=f"m-{i}",
            license=lic,
            service="chat_completions",
            requested_model=name,
            provider="p",
            status_code=200,
        )
    changelist = url(Transaction, "changelist")

    def found(term):
        page = admin_client.get(changelist, {"model": term})
        assert page.status_code == 200
        return sorted(row.requested_model for row in page.context["cl"].result_list)

    assert found("GPT-4O") == ["gpt-4o", "gpt-4o-mini"]
    assert found("4o-MINI") == ["gpt-4o-mini"]
    assert found("o3") == ["o3"]
    assert found("Not-In-Catalog") == ["Not-In-Catalog"]  # as typed, exactly
    assert found("gpt-5") == []

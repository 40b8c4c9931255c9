"""The review page (the admin): who sees which alerts, the content audited at every view, and the
decisions (acknowledge, escalate, close with a note) each through its service with an audit
row. A teacher sees their courses' alerts, a safeguarding contact the institution's, an
institution admin none (they manage the settings); another institution's alert is a 404."""

from __future__ import annotations

import pytest

from licensing.models import AuditEvent, SafeguardingAlert

from .conftest import LIST_URL, alert_url, raise_alert, signed_in

# The admin's scoped querysets: on CI's SQLite pass too.
pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]
SECRET = "I want to hurt myself"


def views(alert) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(
            action="safeguarding_viewed", target=f"safeguarding_alert:{alert.pk}"
        )
    )


def test_the_list_shows_no_content_and_the_change_page_shows_it_audited(world):
    a = world["a"]
    alert = raise_alert(a, text=SECRET)
    client = signed_in(a["teacher"])
    listing = client.get(LIST_URL)
    assert listing.status_code == 200
    page = listing.content.decode()
    assert f"{alert.pk}" in page and "self-harm" in page and SECRET not in page
    assert views(alert) == []
    for n in (1, 2):
        response = client.get(alert_url(alert), REMOTE_ADDR="10.0.0.7")
        assert response.status_code == 200
        assert SECRET in response.content.decode()
        assert len(views(alert)) == n  # every view
    seen = views(alert)[0]
    assert (seen.actor, seen.institution, seen.ip) == (a["teacher"], a["institution"], "10.0.0.7")


@pytest.mark.parametrize(
    ("who", "sees_own_course", "sees_other_course"),
    [
        ("teacher", True, False),
        ("other_teacher", False, True),
        ("contact", True, True),
        ("admin", False, False),
    ],
)
def test_who_sees_which_alerts(world, who, sees_own_course, sees_other_course):
    a = world["a"]
    own = raise_alert(a)
    other = raise_alert(a, course=a["other_course"])
    client = signed_in(a[who])
    for alert, sees in ((own, sees_own_course), (other, sees_other_course)):
        response = client.get(alert_url(alert))
        if sees:
            assert response.status_code == 200
        else:
            assert response.status_code in (403, 404)
            assert SECRET not in response.content.decode()
    listed = client.get(LIST_URL)
    if who == "admin":
        assert listed.status_code == 403
    else:
        page = listed.content.decode()
        assert (f"/{own.pk}/change/" in page) is sees_own_course
        assert (f"/{other.pk}/change/" in page) is sees_other_course


@pytest.mark.parametrize("who", ["teacher", "contact", "admin"])
def test_another_institutions_alert_is_404_and_not_audited(world, who):
    theirs = raise_alert(world["b"])
    client = signed_in(world["a"][who])
    for path in (alert_url(theirs), f"/admin/licensing/safeguardingalert/{theirs.pk}/history/"):
        response = client.get(path)
        assert response.status_code in (403, 404) if who == "admin" else response.status_code == 404
    response = client.post(alert_url(theirs), {"decision": "close", "new_note": "x"})
    assert response.status_code in (403, 404)
    assert SafeguardingAlert.objects.get(pk=theirs.pk).status == "open"
    assert views(theirs) == []


@pytest.mark.parametrize("bad", ["abc", "99999999", "1%00", "9" * 30])
def test_hostile_alert_ids_are_4xx(world, bad):
    response = signed_in(world["a"]["contact"]).get(
        f"/admin/licensing/safeguardingalert/{bad}/change/"
    )
    assert 400 <= response.status_code < 500 or response.status_code == 302


def test_the_superuser_sees_every_institution(world, admin_client):
    a, b = raise_alert(world["a"]), raise_alert(world["b"])
    page = admin_client.get(LIST_URL).content.decode()
    assert f"/{a.pk}/change/" in page and f"/{b.pk}/change/" in page


def decide(client, alert, decision, note=""):
    return client.post(alert_url(alert), {"decision": decision, "new_note": note})


def test_acknowledge_escalate_and_close_each_with_an_audit_row(world):
    a = world["a"]
    alert = raise_alert(a)
    teacher = signed_in(a["teacher"])
    assert decide(teacher, alert, "acknowledge").status_code == 302
    alert.refresh_from_db()
    assert (alert.status, alert.handled_by) == ("acknowledged", a["teacher"])
    assert decide(teacher, alert, "escalate", "Talked to her; passing it on").status_code == 302
    alert.refresh_from_db()
    assert alert.status == "escalated"
    assert alert.note.endswith(" UTC, a-teacher: Talked to her; passing it on")
    contact = signed_in(a["contact"])
    assert decide(contact, alert, "close", "Parents informed.").status_code == 302
    alert.refresh_from_db()
    assert (alert.status, alert.handled_by) == ("closed", a["contact"])
    first, second = alert.note.split("\n\n")  # each note kept, signed
    assert "a-teacher: Talked to her" in first and second.endswith("a-contact: Parents informed.")
    handled = AuditEvent.objects.filter(action="safeguarding_handled").order_by("id")
    assert [(e.actor, e.detail["from"], e.detail["to"]) for e in handled] == [
        (a["teacher"], "open", "acknowledged"),
        (a["teacher"], "acknowledged", "escalated"),
        (a["contact"], "escalated", "closed"),
    ]
    # Closed: read only, and a late decision changes nothing.
    assert decide(contact, alert, "acknowledge").status_code == 403
    assert SafeguardingAlert.objects.get(pk=alert.pk).status == "closed"
    assert SECRET in contact.get(alert_url(alert)).content.decode()


def test_closing_needs_a_note(world):
    a = world["a"]
    alert = raise_alert(a)
    response = decide(signed_in(a["contact"]), alert, "close", "   ")
    assert response.status_code == 200
    assert "A note is required to close an alert." in response.content.decode()
    assert SafeguardingAlert.objects.get(pk=alert.pk).status == "open"


@pytest.mark.parametrize(
    ("note", "message"),
    [
        ("nul \x00 byte", "Null characters are not allowed."),
        ("x" * 100_000, "Ensure this value has at most 2000 characters"),
    ],
    ids=["nul", "100k"],
)
def test_hostile_notes_are_form_errors(world, note, message):
    a = world["a"]
    alert = raise_alert(a)
    response = decide(signed_in(a["contact"]), alert, "close", note)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert SafeguardingAlert.objects.get(pk=alert.pk).status == "open"
    assert not AuditEvent.objects.filter(action="safeguarding_handled").exists()


def test_a_lone_surrogate_in_a_form_never_reaches_the_database(world):
    """A form body is bytes: U+D800 encoded (invalid UTF-8) is decoded by Django as replacement
    characters, so the note is stored without it; the service refuses the surrogate itself
    (next test)."""
    a = world["a"]
    alert = raise_alert(a)
    body = "decision=close&new_note=%ED%A0%80"
    response = signed_in(a["contact"]).post(
        alert_url(alert), body, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code in (200, 302, 400)
    stored = SafeguardingAlert.objects.get(pk=alert.pk)
    assert "\ud800" not in stored.note


def test_the_services_refuse_what_a_form_would_not_send(world):
    from django.core.exceptions import ValidationError
    from django.test import RequestFactory

    from licensing.safeguarding.services import do_close_alert

    a = world["a"]
    alert = raise_alert(a)
    request = RequestFactory().post("/")
    request.user = a["contact"]
    for note in ("\ud800 lone", "\x00", "x" * 2001, ""):
        with pytest.raises(ValidationError):
            do_close_alert(alert=alert, request=request, note=note)
    assert SafeguardingAlert.objects.get(pk=alert.pk).status == "open"


def test_alerts_cannot_be_added_or_deleted_by_hand(world):
    a = world["a"]
    alert = raise_alert(a)
    contact = signed_in(a["contact"])
    assert contact.get(LIST_URL + "add/").status_code == 403
    assert contact.post(f"{LIST_URL}{alert.pk}/delete/", {"post": "yes"}).status_code == 403
    assert SafeguardingAlert.objects.filter(pk=alert.pk).exists()


def test_a_reviewer_sees_no_alert(world):
    from .conftest import staff

    a = world["a"]
    alert = raise_alert(a)
    reviewer = signed_in(staff(a["institution"], "reviewer", "a-reviewer"))
    assert reviewer.get(LIST_URL).status_code == 403
    assert reviewer.get(alert_url(alert)).status_code in (403, 404)
    assert views(alert) == []


@pytest.mark.parametrize("query", ["status=%00", "q=%00", "status=open%00"])
def test_a_nul_in_the_lists_parameters_is_a_400(world, query):
    response = signed_in(world["a"]["contact"]).get(f"{LIST_URL}?{query}")
    assert response.status_code == 400


def test_the_front_page_counts_the_alerts_not_closed(world):
    a = world["a"]
    raise_alert(a)
    raise_alert(a, course=a["other_course"])
    closed = raise_alert(a)
    SafeguardingAlert.objects.filter(pk=closed.pk).update(status="closed")
    contact = signed_in(a["contact"]).get("/admin/").content.decode()
    assert "Safeguarding at School A" in contact and "2 safeguarding alerts not closed" in contact
    teacher = signed_in(a["teacher"]).get("/admin/").content.decode()
    assert "1 safeguarding alert not closed" in teacher
    admin = signed_in(a["admin"]).get("/admin/").content.decode()
    assert "safeguarding-alerts" not in admin

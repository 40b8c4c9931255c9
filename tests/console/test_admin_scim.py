"""SCIM's admin pages as an institution admin sees them: a token made and shown once (it then
works on /scim/v2/), refused for another institution, revoked by the list's action (only the
admin's own); provisioned users and groups listed, searched and filtered, by name, never by id
or JSON, each person linked to their end user page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.models import AdminProfile, AuditEvent, EndUser, ScimGroup, ScimToken, ScimUser

from .test_admin import make_licensing, url

pytestmark = pytest.mark.django_db

TOKEN_RE = re.compile(r"scim-[A-Za-z0-9_-]{43}")


def _staff(institution, role: str = "admin") -> Client:
    user = get_user_model().objects.create_user(f"{role}-{institution.pk}", is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def schools():
    return make_licensing("a"), make_licensing("b")


def _scim_get(token: str):
    return Client().get("/scim/v2/Users", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_token_is_made_shown_once_and_works(schools):
    a, b = schools
    admin = _staff(a["institution"])
    add = url(ScimToken, "add")
    # The institution has a token: replacing it must be asked for.
    kept = admin.post(add, {"institution": a["institution"].pk})
    assert kept.status_code == 200
    assert "This institution has an active token" in kept.content.decode()
    assert ScimToken.objects.filter(institution=a["institution"]).count() == 1
    # Another institution's: not a choice.
    foreign = admin.post(add, {"institution": b["institution"].pk, "rotate": "on"})
    assert foreign.status_code == 200 and foreign.context["adminform"].form.errors
    assert ScimToken.objects.filter(institution=b["institution"], active=True).count() == 1

    made = admin.post(add, {"institution": a["institution"].pk, "rotate": "on"}, follow=True)
    assert made.status_code == 200
    (token,) = TOKEN_RE.findall(made.content.decode())
    assert _scim_get(token).status_code == 200
    rows = ScimToken.objects.filter(institution=a["institution"])
    assert [r.active for r in rows.order_by("pk")] == [False, True]
    event = AuditEvent.objects.filter(action="scim_token_changed").latest("pk")
    assert event.detail["change"] == "rotated" and event.actor.username.startswith("admin-")
    # Never again: not on the list, not on its page (the prefix only).
    new = rows.get(active=True)
    for page in (url(ScimToken, "changelist"), url(ScimToken, "change", new.pk)):
        text = admin.get(page).content.decode()
        assert token not in text and new.digest not in text and f"{new.prefix}…" in text
    # Its last use is noted (the list's "last used").
    new.refresh_from_db()
    assert new.last_used_at is not None


def test_the_revoke_action_stops_only_the_admins_own_tokens(schools):
    a, b = schools
    admin = _staff(a["institution"])
    from licensing.provisioning.services import do_create_scim_token

    token_a = do_create_scim_token(institution=a["institution"], rotate=True)
    token_b = do_create_scim_token(institution=b["institution"], rotate=True)
    own = ScimToken.objects.get(institution=a["institution"], active=True)
    other = ScimToken.objects.get(institution=b["institution"], active=True)
    answer = admin.post(
        url(ScimToken, "changelist"),
        {"action": "revoke", "_selected_action": [own.pk, other.pk]},
        follow=True,
    )
    assert "1 SCIM token(s) revoked." in answer.content.decode()
    assert _scim_get(token_a).status_code == 401
    assert _scim_get(token_b).status_code == 200
    own.refresh_from_db()
    assert own.revoked_at is not None and not own.active
    # Nothing is deleted, nothing edited on a token's page.
    assert admin.get(url(ScimToken, "delete", own.pk)).status_code == 403
    assert admin.post(url(ScimToken, "change", own.pk), {"active": "on"}).status_code in (302, 403)
    own.refresh_from_db()
    assert not own.active


def test_users_and_groups_listed_searched_filtered_by_name(schools):
    a, b = schools
    admin = _staff(a["institution"])
    pupil = a["scim_user"]
    users = url(ScimUser, "changelist")
    page = admin.get(users).content.decode()
    assert "Pupil a" in page and "pupil@a.example" in page and "Pupil b" not in page
    assert "no use of the gateway yet" in page
    for term in ("Pupil a", "ext-a", "pupil@a"):
        found = admin.get(users, {"q": term}).context["cl"].result_list
        assert list(found) == [pupil], term
    assert not admin.get(users, {"q": "Pupil b"}).context["cl"].result_list
    assert admin.get(users, {"q": "a\x00"}).status_code == 400
    ScimUser.objects.filter(pk=pupil.pk).update(active=False)
    assert list(admin.get(users, {"active__exact": "0"}).context["cl"].result_list) == [pupil]
    assert not admin.get(users, {"active__exact": "1"}).context["cl"].result_list
    # Once the person uses the gateway, their end user page is one click away.
    end_user = EndUser.objects.create(license=a["license"], user=pupil.user, subject="p-a")
    change = admin.get(url(ScimUser, "change", pupil.pk)).content.decode()
    assert url(EndUser, "change", end_user.pk) in change
    assert "pupils-a" in change and str(pupil.scim_id) not in change
    group = admin.get(url(ScimGroup, "change", a["scim_group"].pk))
    assert url(ScimUser, "change", pupil.pk) in group.content.decode()
    assert admin.get(url(ScimUser, "change", b["scim_user"].pk)).status_code == 404


def test_reviewers_see_no_scim_page(schools):
    reviewer = _staff(schools[0]["institution"], "reviewer")
    for model in (ScimToken, ScimUser, ScimGroup):
        assert reviewer.get(url(model, "changelist")).status_code == 403

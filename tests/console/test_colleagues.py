"""Institution admins run their institution: colleagues (create with an invitation link, change
the role, deactivate, re-activate) and their own management token, scoped and audited; every
escalation path (forged fields, another institution's users, superusers, roles above their own,
identity-provider roles, oneself, hostile ids) is refused and changes nothing."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from rest_framework.authtoken.models import Token

from licensing.models import AdminProfile, AuditEvent, Colleague

from .test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

User = get_user_model()
ADD = url(Colleague, "add")
LIST = url(Colleague, "changelist")
LINK_RE = re.compile(r"https?://[^\s\"<]+/admin/invitation/[^\s\"<]+/[^\s\"<]+/")


@pytest.fixture
def world(db):
    return {"a": make_licensing("a"), "b": make_licensing("b")}


def staff(name: str, role: str | None, institution, *, idp: bool = False):
    user = User.objects.create_user(name, password="pw-" + name, is_staff=True)
    if role is not None:
        AdminProfile.objects.create(
            user=user, institution=institution, role=role, managed_by_idp=idp
        )
    return user


def signs_in(client: Client, username: str, password: str) -> bool:
    """The admin's login form, as a browser posts it (django-axes wants a request)."""
    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}
    )
    return response.status_code == 302 and response["Location"] == "/admin/"


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_a(world):
    return staff("admin-a", "admin", world["a"]["institution"])


@pytest.fixture
def as_admin_a(admin_a):
    return client_of(admin_a)


def change_url(user) -> str:
    return url(Colleague, "change", user.pk)


def post_change(client, user, **changes):
    page = client.get(change_url(user))
    assert page.status_code == 200
    data = form_data(page)
    data.update(changes)
    return client.post(change_url(user), data)


def snapshot(user) -> tuple:
    user.refresh_from_db()
    profile = AdminProfile.objects.filter(user=user).first()
    return (
        user.is_active,
        user.is_superuser,
        user.is_staff,
        user.email,
        user.groups.count(),
        user.user_permissions.count(),
        profile and (profile.institution_id, profile.role),
    )


# --- creating a colleague ------------------------------------------------------------------


def test_admin_creates_a_colleague_with_an_invitation_link(world, admin_a, as_admin_a):
    response = as_admin_a.post(
        ADD, {"username": "rita", "email": "rita@a.example", "role": "reviewer"}, follow=True
    )
    assert response.status_code == 200
    rita = User.objects.get(username="rita")
    assert (rita.is_staff, rita.is_superuser, rita.has_usable_password()) == (True, False, False)
    profile = rita.gateway_profile
    assert (profile.institution, profile.role) == (world["a"]["institution"], "reviewer")
    # The link is shown once, and e-mailed.
    shown = LINK_RE.findall(response.content.decode())
    assert len(shown) == 1
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["rita@a.example"]
    assert shown[0] in mail.outbox[0].body
    assert LINK_RE.findall(as_admin_a.get(LIST).content.decode()) == []
    event = AuditEvent.objects.get(action="user_created", actor=admin_a)
    assert (event.actor, event.institution, event.target) == (
        admin_a,
        world["a"]["institution"],
        f"user:{rita.pk}",
    )
    assert event.detail == {
        "after": {"username": "rita", "email": "rita@a.example", "role": "reviewer", "active": True}
    }

    # The colleague sets a password with the link and signs in; the link is then spent.
    path = shown[0].split("testserver", 1)[1]
    invited = Client()
    form = invited.get(path, follow=True)
    assert form.status_code == 200 and b"new_password1" in form.content
    done = invited.post(
        form.redirect_chain[-1][0],
        {"new_password1": "A-long-pass-phrase-42", "new_password2": "A-long-pass-phrase-42"},
        follow=True,
    )
    assert done.status_code == 200
    rita.refresh_from_db()
    assert rita.check_password("A-long-pass-phrase-42")
    again = Client().get(path, follow=True)
    assert b"new_password1" not in again.content  # the token is spent
    signed_in = Client()
    assert signs_in(signed_in, "rita", "A-long-pass-phrase-42")
    # A reviewer reads the ledger, but does not manage users.
    assert signed_in.get(url(Colleague, "changelist")).status_code == 403


def test_colleague_without_email_gets_the_link_on_screen_only(world, as_admin_a):
    response = as_admin_a.post(ADD, {"username": "tom", "role": "teacher"}, follow=True)
    assert len(LINK_RE.findall(response.content.decode())) == 1
    assert mail.outbox == []
    assert User.objects.get(username="tom").gateway_profile.role == "teacher"


def test_forged_fields_on_create_are_ignored(world, as_admin_a):
    other = world["b"]["institution"]
    response = as_admin_a.post(
        ADD,
        {
            "username": "mallory",
            "role": "admin",
            "is_superuser": "on",
            "is_staff": "on",
            "groups": "1",
            "user_permissions": "1",
            "institution": str(other.pk),
            "password": "x",
        },
    )
    assert response.status_code == 302
    mallory = User.objects.get(username="mallory")
    assert not mallory.is_superuser and not mallory.has_usable_password()
    assert mallory.gateway_profile.institution == world["a"]["institution"]
    assert mallory.groups.count() == 0 and mallory.user_permissions.count() == 0


def post_raw(client, path, body: str):
    """A form body as bytes on the wire: percent-escapes a browser could send (%00, an
    encoded lone surrogate %ED%A0%80, which is no UTF-8)."""
    return client.post(path, body, content_type="application/x-www-form-urlencoded")


@pytest.mark.parametrize("role", ["superuser", "owner", "", "admin%00", "%ED%A0%80", "x" * 5000])
def test_unknown_roles_are_a_form_error(world, as_admin_a, role):
    response = post_raw(as_admin_a, ADD, f"username=eve&role={role}")
    assert response.status_code == 200
    assert 'class="errorlist' in response.content.decode()
    assert not User.objects.filter(username="eve").exists()


@pytest.mark.parametrize("name", ["bad%00name", "x" * 200, "%ED%A0%80", "", "a%20b"])
def test_hostile_usernames_are_a_form_error(world, as_admin_a, name):
    before = User.objects.count()
    response = post_raw(as_admin_a, ADD, f"username={name}&role=reviewer")
    assert response.status_code == 200
    assert 'class="errorlist' in response.content.decode()
    assert User.objects.count() == before


def test_an_existing_username_is_a_form_error(world, admin_a, as_admin_a):
    response = as_admin_a.post(ADD, {"username": "staff-b", "role": "reviewer"})
    assert response.status_code == 200
    assert "already exists" in response.content.decode()


def test_superuser_creates_a_colleague_in_any_institution(world, admin_client):
    other = world["b"]["institution"]
    response = admin_client.post(
        ADD, {"username": "bob", "role": "admin", "institution": other.pk}, follow=True
    )
    assert response.status_code == 200
    assert User.objects.get(username="bob").gateway_profile.institution == other


# --- changing a colleague --------------------------------------------------------------------


def test_admin_changes_a_role_and_deactivates_and_reactivates(world, admin_a, as_admin_a):
    colleague = staff("rev-a", "reviewer", world["a"]["institution"])
    assert post_change(as_admin_a, colleague, role="admin").status_code == 302
    assert AdminProfile.objects.get(user=colleague).role == "admin"
    event = AuditEvent.objects.get(action="role_changed", actor=admin_a)
    assert event.detail == {"before": {"role": "reviewer"}, "after": {"role": "admin"}}
    assert event.actor == admin_a

    data = form_data(as_admin_a.get(change_url(colleague)))
    data.pop("is_active")  # an unticked box is not sent
    assert as_admin_a.post(change_url(colleague), data).status_code == 302
    colleague.refresh_from_db()
    assert colleague.is_active is False
    off = AuditEvent.objects.get(action="user_deactivated", actor=admin_a)
    assert off.detail == {"before": {"active": True}, "after": {"active": False}}
    assert not signs_in(Client(), "rev-a", "pw-rev-a")

    assert post_change(as_admin_a, colleague, is_active="on").status_code == 302
    colleague.refresh_from_db()
    assert colleague.is_active is True
    back = AuditEvent.objects.filter(action="role_changed", actor=admin_a).first()
    assert back.detail == {"before": {"active": False}, "after": {"active": True}}


def test_list_shows_only_own_institution_without_superusers(world, as_admin_a, admin_user):
    staff("rev-b", "reviewer", world["b"]["institution"])
    staff("rev-a", "reviewer", world["a"]["institution"])
    page = as_admin_a.get(LIST).content.decode()
    shown = set(
        re.findall(r'<a href="/admin/licensing/colleague/\d+/change/[^"]*">([^<]+)</a>', page)
    )
    assert shown == {"admin-a", "rev-a", "staff-a"}


def test_another_institutions_user_is_a_404_on_every_path(world, as_admin_a):
    target = staff("rev-b", "reviewer", world["b"]["institution"])
    before = snapshot(target)
    for path in (change_url(target), url(Colleague, "history", target.pk)):
        assert as_admin_a.get(path).status_code == 404
    forged = {"email": "x@evil.example", "role": "admin", "is_superuser": "on"}
    assert as_admin_a.post(change_url(target), forged).status_code == 404
    assert as_admin_a.post(url(Colleague, "delete", target.pk), {"post": "yes"}).status_code in (
        403,
        404,
    )
    action = as_admin_a.post(
        LIST, {"action": "new_invitation", "_selected_action": [str(target.pk)]}
    )
    assert action.status_code in (200, 302)
    assert snapshot(target) == before
    assert not AuditEvent.objects.filter(target=f"user:{target.pk}").exists()


def test_superusers_and_users_without_a_role_are_out_of_reach(world, as_admin_a, admin_user):
    plain = User.objects.create_user("plain", is_staff=True)
    for target in (admin_user, plain):
        before = snapshot(target)
        assert as_admin_a.get(change_url(target)).status_code == 404
        assert as_admin_a.post(change_url(target), {"is_active": ""}).status_code == 404
        assert snapshot(target) == before


def test_a_superuser_with_a_profile_stays_out_of_reach(world, as_admin_a):
    boss = User.objects.create_superuser("boss", "boss@example.test", "pw")
    AdminProfile.objects.create(user=boss, institution=world["a"]["institution"], role="admin")
    before = snapshot(boss)
    assert as_admin_a.get(change_url(boss)).status_code == 404
    assert as_admin_a.post(change_url(boss), {"role": "reviewer"}).status_code == 404
    assert snapshot(boss) == before


def test_forged_fields_on_change_are_ignored(world, as_admin_a):
    colleague = staff("rev-a", "reviewer", world["a"]["institution"])
    response = post_change(
        as_admin_a,
        colleague,
        is_superuser="on",
        groups="1",
        user_permissions="1",
        institution=str(world["b"]["institution"].pk),
        username="renamed",
        password="x",
    )
    assert response.status_code == 302
    colleague.refresh_from_db()
    assert (colleague.username, colleague.is_superuser) == ("rev-a", False)
    assert not colleague.has_usable_password() or colleague.check_password("pw-rev-a")
    assert colleague.gateway_profile.institution == world["a"]["institution"]


def test_an_admin_cannot_deactivate_or_demote_themselves(world, admin_a, as_admin_a):
    page = as_admin_a.get(change_url(admin_a))
    assert page.status_code == 200
    text = page.content.decode()
    assert "you cannot deactivate yourself" in text and "your own role" in text
    data = form_data(page)
    data.update(role="reviewer")
    data.pop("is_active", None)
    assert as_admin_a.post(change_url(admin_a), data).status_code == 302
    admin_a.refresh_from_db()
    assert admin_a.is_active and admin_a.gateway_profile.role == "admin"
    assert not AuditEvent.objects.filter(actor=admin_a).exists()


def test_a_role_managed_by_the_identity_provider_is_read_only(world, as_admin_a):
    synced = staff("synced", "reviewer", world["a"]["institution"], idp=True)
    page = as_admin_a.get(change_url(synced)).content.decode()
    assert "managed by the identity provider" in page
    assert 'name="role"' not in page
    data = form_data(as_admin_a.get(change_url(synced)))
    data["role"] = "admin"
    assert as_admin_a.post(change_url(synced), data).status_code == 302
    assert AdminProfile.objects.get(user=synced).role == "reviewer"
    # Its access can still be taken away.
    data.pop("is_active")
    assert as_admin_a.post(change_url(synced), data).status_code == 302
    synced.refresh_from_db()
    assert not synced.is_active


@pytest.mark.parametrize("object_id", [str(2**64), "abc", "%00", "-1", "1%00", "%ED%A0%80"])
def test_hostile_ids_are_404(world, as_admin_a, object_id):
    for suffix in ("change/", "history/"):
        response = as_admin_a.get(f"{LIST}{object_id}/{suffix}")
        assert response.status_code in (302, 404), (suffix, response.status_code)
    assert as_admin_a.get(f"{LIST}{object_id}/delete/").status_code == 403  # no deleting
    assert as_admin_a.post(f"{LIST}{object_id}/change/", {"role": "admin"}).status_code in (
        302,
        404,
    )


@pytest.mark.parametrize("role", ["reviewer", "teacher"])
def test_reviewers_and_teachers_cannot_manage_users(world, role):
    user = staff(f"{role}-a", role, world["a"]["institution"])
    colleague = staff("other-a", "reviewer", world["a"]["institution"])
    client = client_of(user)
    assert client.get(LIST).status_code == 403
    assert client.get(change_url(colleague)).status_code == 403
    assert client.post(ADD, {"username": "x", "role": "admin"}).status_code == 403
    assert client.post(change_url(colleague), {"role": "admin"}).status_code == 403
    assert not User.objects.filter(username="x").exists()
    assert AdminProfile.objects.get(user=colleague).role == "reviewer"
    assert client.get("/admin/auth/user/").status_code == 403


def test_the_service_refuses_what_the_form_would_not_offer(world, admin_a):
    from django.core.exceptions import PermissionDenied, ValidationError

    from licensing.access.colleagues import colleague_create, colleague_update

    synced = staff("synced", "reviewer", world["a"]["institution"], idp=True)
    foreign = staff("rev-b", "reviewer", world["b"]["institution"])
    with pytest.raises(PermissionDenied):
        colleague_update(actor=admin_a, user=synced, role="admin")
    with pytest.raises(PermissionDenied):
        colleague_update(actor=admin_a, user=foreign, active=False)
    with pytest.raises(PermissionDenied):
        colleague_update(actor=admin_a, user=admin_a, active=False)
    with pytest.raises(ValidationError):
        colleague_create(actor=admin_a, username="z", role="superuser")
    reviewer = staff("rev-a", "reviewer", world["a"]["institution"])
    with pytest.raises(PermissionDenied):
        colleague_create(actor=reviewer, username="z", role="reviewer")
    assert not User.objects.filter(username="z").exists()
    assert not AuditEvent.objects.filter(actor__in=[admin_a, reviewer]).exists()


# --- management tokens -----------------------------------------------------------------------


@pytest.mark.parametrize("role", ["admin", "reviewer"])
def test_my_api_token_is_created_rotated_and_shown_once(world, role):
    user = staff(f"{role}-tok", role, world["a"]["institution"])
    client = client_of(user)
    index = client.get("/admin/").content.decode()
    assert 'href="/admin/my-token/"' in index
    page = client.get("/admin/my-token/")
    assert page.status_code == 200 and b"no token yet" in page.content
    created = client.post("/admin/my-token/")
    first = Token.objects.get(user=user).key
    assert first in created.content.decode() and "no-store" in created["Cache-Control"]
    assert first not in client.get("/admin/my-token/").content.decode()
    api = Client(headers={"Authorization": f"Token {first}"})
    assert api.get("/manage/v1/licenses").status_code == 200

    rotated = client.post("/admin/my-token/")
    second = Token.objects.get(user=user).key
    assert second != first and second in rotated.content.decode()
    assert api.get("/manage/v1/licenses").status_code == 401
    events = list(AuditEvent.objects.filter(action="token_created").order_by("id"))
    assert [e.detail for e in events] == [
        {"for": user.username, "rotated": False},
        {"for": user.username, "rotated": True},
    ]
    assert all(e.actor == user and first not in str(e.detail) for e in events)


def test_staff_without_a_usable_role_get_no_token(world):
    plain = staff("plain", None, None)
    assert client_of(plain).post("/admin/my-token/").status_code == 403
    assert b"my-token-link" not in client_of(plain).get("/admin/").content
    assert Client().get("/admin/my-token/").status_code == 302  # to the login page
    assert not Token.objects.exists()
    # A teacher holds one (issue 26: scoped to their courses, tests/console/test_manage_courses*).
    teacher = staff("teach", "teacher", world["a"]["institution"])
    assert b"my-token-link" in client_of(teacher).get("/admin/").content
    assert client_of(teacher).post("/admin/my-token/").status_code == 200
    assert Token.objects.filter(user=teacher).exists()


def test_create_management_token_command_audits_a_new_token(world, capsys):
    from django.core.management import call_command

    user = staff("adm", "admin", world["a"]["institution"])
    call_command("create_management_token", user.username)
    call_command("create_management_token", user.username)  # the same token: no new event
    event = AuditEvent.objects.get(action="token_created")
    assert event.actor_name == "manage.py create_management_token"
    assert event.institution == world["a"]["institution"]
    assert Token.objects.get(user=user).key not in str(event.detail)


def test_a_new_invitation_link_only_for_who_never_signed_in(world, admin_a, as_admin_a):
    from django.utils import timezone

    waiting = staff("waiting", "reviewer", world["a"]["institution"])
    active = staff("active", "admin", world["a"]["institution"])
    User.objects.filter(pk=active.pk).update(last_login=timezone.now())
    response = as_admin_a.post(
        LIST,
        {"action": "new_invitation", "_selected_action": [str(waiting.pk), str(active.pk)]},
        follow=True,
    )
    text = response.content.decode()
    links = LINK_RE.findall(text)
    assert len(links) == 1 and "Waiting sets their password" in text
    assert "1 selected colleague(s) got no link" in text


@pytest.mark.parametrize("params", [{"q": "\x00"}, {"is_active__exact": "\x00"}, {"x\x00": "1"}])
def test_nul_in_the_list_parameters_is_400(world, as_admin_a, params):
    assert as_admin_a.get(LIST, params).status_code == 400

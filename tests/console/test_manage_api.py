"""The management API (/manage/v1/): each endpoint, each role, cross-institution access (404,
nothing changed), token and session authentication, filters, cursor pagination, OpenAPI."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from licensing.access.credentials import resolve_credential
from licensing.models import AdminProfile, ApiKey, EndUser, License, Wallet

from .test_admin import make_licensing

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

BASE = "/manage/v1"


@pytest.fixture
def world(db):
    return {"a": make_licensing("a"), "b": make_licensing("b")}


def user_with(role: str | None, institution=None, *, superuser=False):
    User = get_user_model()
    name = f"{role or 'super' if superuser else role}-{institution.pk if institution else 0}"
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.test", "pw")
    user = User.objects.create_user(name, is_staff=True)
    if role is not None:
        AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


def token_client(user) -> Client:
    token = Token.objects.create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}"})


@pytest.fixture
def admin_a(world):
    return token_client(user_with("admin", world["a"]["institution"]))


@pytest.fixture
def reviewer_a(world):
    return token_client(user_with("reviewer", world["a"]["institution"]))


def ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_anonymous_is_401_and_staff_without_role_is_403(world):
    assert Client().get(f"{BASE}/licenses").status_code == 401
    bad = Client(headers={"Authorization": "Token nope"}).get(f"{BASE}/licenses")
    assert bad.status_code == 401 and bad.json() == {"detail": "Invalid token."}
    plain = token_client(user_with(None))
    assert plain.get(f"{BASE}/licenses").status_code == 403


def test_licenses_are_scoped_and_carry_usage(world, admin_a, reviewer_a):
    lic, other = world["a"]["license"], world["b"]["license"]
    Wallet.objects.filter(license=lic).update(spent=250_000)
    for client in (admin_a, reviewer_a):
        assert ids(client.get(f"{BASE}/licenses")) == {lic.pk}
        body = client.get(f"{BASE}/licenses/{lic.pk}").json()
        usage = body["usage"]
        assert body["institution"] == "Institution a"
        assert (usage["limit"], usage["spent"], usage["holders"]) == (1_000_000, 250_000, 1)
        assert usage["remaining"] == 750_000 and usage["period"] == "monthly"
        assert usage["resets_at"] > usage["window_start"]
        assert client.get(f"{BASE}/licenses/{other.pk}").status_code == 404
        assert client.get(f"{BASE}/licenses", {"name": "license-b"}).json()["results"] == []


def test_superuser_sees_every_institution(world):
    client = token_client(user_with(None, superuser=True))
    assert ids(client.get(f"{BASE}/licenses")) == {
        world["a"]["license"].pk,
        world["b"]["license"].pk,
    }


def test_reviewer_cannot_touch_keys_or_end_users(world, reviewer_a):
    key = world["a"]["api_key"]
    assert reviewer_a.get(f"{BASE}/keys").status_code == 403
    assert reviewer_a.get(f"{BASE}/end-users").status_code == 403
    post = reviewer_a.post(f"{BASE}/keys", {"license": world["a"]["license"].pk})
    assert post.status_code == 403
    assert reviewer_a.post(f"{BASE}/keys/{key.pk}/revoke").status_code == 403
    assert ApiKey.objects.filter(license=world["a"]["license"]).count() == 1
    assert ApiKey.objects.get(pk=key.pk).active


def test_key_create_shows_the_key_once_and_it_works(world, admin_a):
    lic = world["a"]["license"]
    response = admin_a.post(
        f"{BASE}/keys", {"license": lic.pk, "name": "lms"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["key"].startswith("sk-svc-") and body["license"] == lic.pk
    assert body["name"] == "lms" and body["active"] is True and body["last_used_at"] is None
    principal = resolve_credential(body["key"])
    assert principal is not None and principal.api_key_id == body["id"]
    listed = admin_a.get(f"{BASE}/keys", {"license": lic.pk}).json()["results"]
    assert {row["id"] for row in listed} == {body["id"], world["a"]["api_key"].pk}
    assert all("key" not in row for row in listed)
    assert "key" not in admin_a.get(f"{BASE}/keys/{body['id']}").json()


def test_key_create_on_another_institutions_license_is_refused(world, admin_a):
    other = world["b"]["license"]
    response = admin_a.post(f"{BASE}/keys", {"license": other.pk}, content_type="application/json")
    assert response.status_code == 400
    assert "license" in response.json()
    assert ApiKey.objects.filter(license=other).count() == 1


def test_revoke_and_rotate(world, admin_a):
    key = world["a"]["api_key"]
    rotated = admin_a.post(f"{BASE}/keys/{key.pk}/rotate")
    assert rotated.status_code == 201
    new = rotated.json()
    assert new["id"] != key.pk and new["name"] == key.name and new["key"].startswith("sk-svc-")
    key.refresh_from_db()
    assert key.active is False
    assert resolve_credential(world["a"]["key"]) is None
    assert resolve_credential(new["key"]).api_key_id == new["id"]
    revoked = admin_a.post(f"{BASE}/keys/{new['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert resolve_credential(new["key"]) is None
    assert admin_a.get(f"{BASE}/keys", {"active": "false"}).json()["results"]


def test_other_institutions_keys_are_404_and_unchanged(world, admin_a):
    other = world["b"]["api_key"]
    assert admin_a.get(f"{BASE}/keys/{other.pk}").status_code == 404
    assert admin_a.post(f"{BASE}/keys/{other.pk}/revoke").status_code == 404
    assert admin_a.post(f"{BASE}/keys/{other.pk}/rotate").status_code == 404
    assert admin_a.delete(f"{BASE}/keys/{other.pk}").status_code in (404, 405)
    assert ApiKey.objects.filter(license=world["b"]["license"]).count() == 1
    other.refresh_from_db()
    assert other.active
    assert resolve_credential(world["b"]["key"]).api_key_id == other.pk
    bad_filter = admin_a.get(f"{BASE}/keys", {"license": world["b"]["license"].pk})
    assert bad_filter.status_code == 400


def test_end_users_are_scoped(world, admin_a):
    own, other = world["a"]["end_user"], world["b"]["end_user"]
    assert ids(admin_a.get(f"{BASE}/end-users")) == {own.pk}
    body = admin_a.get(f"{BASE}/end-users/{own.pk}").json()
    assert body["subject"] == "user-a" and body["issuer"] == "https://idp-a.example"
    assert admin_a.get(f"{BASE}/end-users/{other.pk}").status_code == 404
    assert ids(admin_a.get(f"{BASE}/end-users", {"subject": "user-a"})) == {own.pk}
    assert admin_a.delete(f"{BASE}/end-users/{own.pk}").status_code == 405
    assert EndUser.objects.filter(pk=own.pk).exists()


def test_cursor_pagination(world, admin_a):
    lic = world["a"]["license"]
    for i in range(3):
        admin_a.post(f"{BASE}/keys", {"license": lic.pk, "name": f"k{i}"})
    seen = []
    page = admin_a.get(f"{BASE}/keys", {"page_size": 2}).json()
    while True:
        seen += [row["id"] for row in page["results"]]
        if not page["next"]:
            break
        page = admin_a.get(page["next"]).json()
    assert seen == sorted(ApiKey.objects.filter(license=lic).values_list("pk", flat=True))[::-1]


def test_session_authentication_with_csrf(world):
    user = user_with("admin", world["a"]["institution"])
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert ids(client.get(f"{BASE}/licenses")) == {world["a"]["license"].pk}
    refused = client.post(f"{BASE}/keys", {"license": world["a"]["license"].pk})
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]


def test_openapi_document_is_served(world):
    response = Client().get(f"{BASE}/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for expected in (
        "/manage/v1/licenses",
        "/manage/v1/keys",
        "/manage/v1/keys/{id}/rotate",
        "/manage/v1/keys/{id}/revoke",
        "/manage/v1/end-users",
    ):
        assert expected in paths


def test_create_management_token_prints_only_the_token(world, capsys):
    user = user_with("admin", world["a"]["institution"])
    call_command("create_management_token", user.username)
    printed = capsys.readouterr().out.strip()
    assert printed == Token.objects.get(user=user).key
    client = Client(headers={"Authorization": f"Token {printed}"})
    assert ids(client.get(f"{BASE}/licenses")) == {world["a"]["license"].pk}


def test_create_management_token_refuses_users_without_access(world):
    from django.core.management.base import CommandError

    plain = user_with(None)
    with pytest.raises(CommandError, match="no access"):
        call_command("create_management_token", plain.username)
    with pytest.raises(CommandError, match="No user"):
        call_command("create_management_token", "ghost")
    assert not Token.objects.exists()


def test_create_institution_admin_command(world, monkeypatch, capsys):
    from django.core.management.base import CommandError

    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "s3cret-pass")
    call_command(
        "create_institution_admin",
        "Institution a",
        "head",
        "--role",
        "reviewer",
        "--email",
        "head@example.test",
        "--noinput",
    )
    user = get_user_model().objects.get(username="head")
    assert user.is_staff and not user.is_superuser and user.check_password("s3cret-pass")
    assert (user.gateway_profile.institution.name, user.gateway_profile.role) == (
        "Institution a",
        "reviewer",
    )
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_institution_admin", "Institution a", "head", "--noinput")
    with pytest.raises(CommandError, match="No institution named"):
        call_command("create_institution_admin", "Nowhere", "x", "--noinput")
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD")
    with pytest.raises(CommandError, match="DJANGO_SUPERUSER_PASSWORD"):
        call_command("create_institution_admin", "Institution a", "y", "--noinput")
    assert not get_user_model().objects.filter(username__in=["x", "y"]).exists()
    assert License.objects.count() == 2

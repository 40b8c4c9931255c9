"""The audit log: what lands in it (API keys from the admin, the management API and the command;
policy, budget and money-rate changes; before and after, never a secret) and who reads it (the
admin page and GET /manage/v1/audit: superusers all, an institution admin its institution's,
reviewers nothing), with its filters and CSV export."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from licensing.access.audit import audit_event_record
from licensing.models import AdminProfile, ApiKey, AuditEvent, Institution, License, LicenseType

from .test_admin import form_data, make_licensing, url

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

User = get_user_model()
KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")
LIST = url(AuditEvent, "changelist")
EXPORT = "/admin/licensing/auditevent/export/"


@pytest.fixture
def world(db):
    return {"a": make_licensing("a"), "b": make_licensing("b")}


def staff(name, role, institution):
    user = User.objects.create_user(name, is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def token_client(user) -> Client:
    return Client(headers={"Authorization": f"Token {Token.objects.create(user=user).key}"})


def csv_rows(response) -> list[dict]:
    assert response.status_code == 200, response
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


# --- what lands in the log -------------------------------------------------------------------


def test_api_keys_created_and_revoked_in_the_admin_are_audited(world, admin_client, admin_user):
    lic = world["a"]["license"]
    added = admin_client.post(
        url(ApiKey, "add"), {"license": lic.pk, "name": "lab", "active": "on"}, follow=True
    )
    key = KEY_RE.search(added.content.decode()).group(0)
    row = ApiKey.objects.get(name="lab")
    created = AuditEvent.objects.get(action="api_key_created", target=f"api_key:{row.pk}")
    assert (created.actor, created.institution_id) == (admin_user, lic.institution_id)
    assert created.detail == {
        "prefix": row.prefix,
        "name": "lab",
        "license": lic.name,
        "via": "admin",
    }
    assert key not in json.dumps(created.detail) and created.ip == "127.0.0.1"

    changelist = url(ApiKey, "changelist")
    admin_client.post(changelist, {"action": "deactivate", "_selected_action": [row.pk]})
    admin_client.post(changelist, {"action": "deactivate", "_selected_action": [row.pk]})
    revoked = AuditEvent.objects.filter(action="api_key_revoked", target=f"api_key:{row.pk}")
    assert revoked.count() == 1  # the second deactivation changed nothing
    assert revoked.get().detail["after"] == {"active": False}


def test_api_keys_of_the_management_api_and_the_command_are_audited(world, capsys):
    inst = world["a"]["institution"]
    admin = staff("adm-a", "admin", inst)
    api = token_client(admin)
    lic = world["a"]["license"]
    made = api.post("/manage/v1/keys", {"license": lic.pk, "name": "lms"})
    assert made.status_code == 201
    new_id = made.json()["id"]
    rotated = api.post(f"/manage/v1/keys/{new_id}/rotate")
    assert rotated.status_code == 201
    api.post(f"/manage/v1/keys/{rotated.json()['id']}/revoke")
    events = AuditEvent.objects.filter(actor=admin).order_by("id")
    assert [(e.action, e.detail["via"]) for e in events] == [
        ("api_key_created", "management API"),
        ("api_key_created", "management API"),
        ("api_key_revoked", "management API"),
        ("api_key_revoked", "management API"),
    ]
    assert events[2].target == f"api_key:{new_id}"  # the rotated-out key
    for body in (made.json(), rotated.json()):
        assert body["key"] not in json.dumps([e.detail for e in events])

    call_command("create_api_key", lic.name, "--name", "cli")
    key = capsys.readouterr().out.strip()
    event = AuditEvent.objects.get(action="api_key_created", detail__via="command")
    assert event.actor is None and event.actor_name == "manage.py create_api_key"
    assert key not in json.dumps(event.detail) and event.institution == inst


def test_policy_budget_and_rate_changes_record_before_and_after(world, admin_client):
    lic = world["a"]["license"]
    data = form_data(admin_client.get(url(License, "change", lic.pk)))
    data.update(budget_limit="2.00", budget_period="daily")
    assert admin_client.post(url(License, "change", lic.pk), data).status_code == 302
    budget = AuditEvent.objects.get(action="budget_changed", target=f"license:{lic.pk}")
    assert budget.detail == {
        "name": lic.name,
        "before": {"budget_period": "monthly", "budget_limit": 1_000_000},
        "after": {"budget_period": "daily", "budget_limit": 2_000_000},
    }
    # Saving without a change writes nothing.
    data = form_data(admin_client.get(url(License, "change", lic.pk)))
    admin_client.post(url(License, "change", lic.pk), data)
    assert AuditEvent.objects.filter(action="budget_changed").count() == 1

    own = LicenseType.objects.create(institution=lic.institution, name="strict")
    data = form_data(admin_client.get(url(LicenseType, "change", own.pk)))
    policy = json.loads(data["policy"])
    data["guardrails"] = json.dumps({"input": {"patterns": ["exam answers"]}})
    response = admin_client.post(url(LicenseType, "change", own.pk), data)
    assert response.status_code == 302, response.content[:2000]
    change = AuditEvent.objects.get(action="policy_changed")
    assert change.detail["after"] == {"guardrails": {"input": {"patterns": ["exam answers"]}}}
    assert change.detail["before"] == {"guardrails": own.guardrails}
    assert change.institution == lic.institution and policy  # the policy stayed as it was

    inst = lic.institution
    data = form_data(admin_client.get(url(Institution, "change", inst.pk)))
    data.update(currency="EUR", micro_credits_per_currency_unit="1100000")
    assert admin_client.post(url(Institution, "change", inst.pk), data).status_code == 302
    rate = AuditEvent.objects.get(action="budget_changed", target=f"institution:{inst.pk}")
    assert rate.detail["before"] == {"currency": "", "micro_credits_per_currency_unit": None}
    assert rate.detail["after"] == {"currency": "EUR", "micro_credits_per_currency_unit": 1100000}


def test_audit_event_record_survives_hostile_text(world):
    event = audit_event_record(
        action=AuditEvent.Action.SIGN_IN_REFUSED,
        actor_name="eve\x00\ud800" + "x" * 1000,
        target="user:\x00",
    )
    event.refresh_from_db()
    assert "\x00" not in event.actor_name and len(event.actor_name) == 254


# --- who reads the log -----------------------------------------------------------------------


def events_shown(client, params=None) -> set[str]:
    response = client.get(LIST, params or {})
    assert response.status_code == 200
    return {event.actor_name for event in response.context["cl"].result_list}


def test_the_admin_page_is_scoped_by_role(world, admin_client):
    a, b = world["a"]["institution"], world["b"]["institution"]
    assert events_shown(admin_client) == {"staff-a", "staff-b"}
    admin_a = client_of(staff("adm-a", "admin", a))
    assert events_shown(admin_a) == {"staff-a"}
    other = AuditEvent.objects.get(institution=b)
    assert admin_a.get(url(AuditEvent, "change", other.pk)).status_code == 404
    own = AuditEvent.objects.get(institution=a, actor_name="staff-a")
    page = admin_a.get(url(AuditEvent, "change", own.pk))
    assert page.status_code == 200 and b"reviewer" in page.content
    # Read-only for everyone.
    assert admin_a.post(url(AuditEvent, "change", own.pk), {"action": "x"}).status_code == 403
    assert admin_client.get(url(AuditEvent, "add")).status_code == 403
    assert admin_client.post(url(AuditEvent, "delete", own.pk), {"post": "yes"}).status_code == 403
    # A gateway-wide event (no institution) is for superusers only.
    wide = audit_event_record(action=AuditEvent.Action.SSO_CONFIGURED, actor_name="ops")
    assert admin_a.get(url(AuditEvent, "change", wide.pk)).status_code == 404
    for role in ("reviewer", "teacher"):
        client = client_of(staff(f"{role}-a", role, a))
        assert client.get(LIST).status_code == 403
        assert client.get(EXPORT).status_code == 403


def test_events_without_an_actor_are_offered_in_words(world, admin_client):
    """The actor filter's link for events without a name (a command's, the system's) has text:
    an empty link has no name for a screen reader."""
    audit_event_record(
        action=AuditEvent.Action.COURSE_CREATED, institution=world["a"]["institution"]
    )
    page = admin_client.get(LIST).content.decode()
    assert '<a href="?actor_name=">(no name)</a>' in page
    assert events_shown(admin_client, {"actor_name": ""}) == {""}


def test_the_admin_page_filters_and_exports_csv(world, admin_client):
    inst = world["a"]["institution"]
    audit_event_record(
        action=AuditEvent.Action.API_KEY_REVOKED,
        actor_name="=cmd|' /C calc'!A0",
        institution=inst,
        target="api_key:1",
        detail={"via": "admin"},
    )
    assert events_shown(admin_client, {"action__exact": "api_key_revoked"}) == {
        "=cmd|' /C calc'!A0"
    }
    assert events_shown(admin_client, {"actor_name": "staff-b"}) == {"staff-b"}
    assert events_shown(admin_client, {"created_at__gte": "2000-01-01T00:00:00+00:00"}) != set()
    rows = csv_rows(admin_client.get(EXPORT, {"action__exact": "api_key_revoked"}))
    assert len(rows) == 1
    assert rows[0]["actor"] == "'=cmd|' /C calc'!A0"  # no formula in a spreadsheet
    assert rows[0]["institution"] == "Institution a" and rows[0]["detail"] == '{"via":"admin"}'
    assert list(rows[0]) == [
        "id",
        "created_at",
        "institution",
        "actor",
        "action",
        "target",
        "detail",
        "ip",
        "user_agent",
    ]
    admin_a = client_of(staff("adm-a", "admin", inst))
    assert {row["institution"] for row in csv_rows(admin_a.get(EXPORT))} == {"Institution a"}
    assert admin_client.get(EXPORT, {"created_at__gte": "not-a-date"}).status_code in (200, 400)
    for params in ({"action__exact": "\x00"}, {"actor_name": "a\x00"}, {"q": "\x00"}):
        assert admin_client.get(LIST, params).status_code == 400  # not a 500 on PostgreSQL
        assert admin_client.get(EXPORT, params).status_code == 400


def test_manage_api_audit_is_scoped_filtered_and_exports_csv(world):
    a = world["a"]["institution"]
    admin_a = token_client(staff("adm-a", "admin", a))
    body = admin_a.get("/manage/v1/audit").json()
    assert [row["actor"] for row in body["results"]] == ["staff-a"]
    assert body["results"][0]["detail"] == {
        "before": {"role": "reviewer"},
        "after": {"role": "admin"},
    }
    assert body["results"][0]["institution"] == "Institution a"
    other = AuditEvent.objects.get(institution=world["b"]["institution"])
    assert admin_a.get(f"/manage/v1/audit/{other.pk}").status_code == 404
    assert admin_a.get("/manage/v1/audit", {"action": "sign_in"}).json()["results"] == []
    assert admin_a.get("/manage/v1/audit", {"action": "bogus"}).status_code == 400
    assert admin_a.get("/manage/v1/audit", {"since": "x"}).status_code == 400
    for hostile in ("\x00", "9" * 400):
        assert admin_a.get("/manage/v1/audit", {"actor": hostile}).status_code in (200, 400)
    rows = csv_rows(admin_a.get("/manage/v1/audit", {"format": "csv"}))
    assert [row["actor"] for row in rows] == ["staff-a"]

    reviewer = token_client(staff("rev-a", "reviewer", a))
    assert reviewer.get("/manage/v1/audit").status_code == 403
    assert reviewer.get("/manage/v1/audit", {"format": "csv"}).status_code == 403
    superuser = User.objects.create_superuser("root", "root@example.test", "pw")
    everything = token_client(superuser).get("/manage/v1/audit").json()["results"]
    assert {row["actor"] for row in everything} == {"staff-a", "staff-b"}


def test_a_superusers_role_and_user_changes_are_audited(world, admin_client, admin_user):
    profile = world["a"]["admin_profile"]
    change = url(AdminProfile, "change", profile.pk)
    data = form_data(admin_client.get(change))
    data["role"] = "reviewer"
    assert admin_client.post(change, data).status_code == 302
    event = AuditEvent.objects.get(action="role_changed", actor=admin_user)
    assert event.detail == {"before": {"role": "admin"}, "after": {"role": "reviewer"}}
    assert event.target == f"user:{profile.user_id}"

    user_change = f"/admin/auth/user/{profile.user_id}/change/"
    data = form_data(admin_client.get(user_change))
    data.pop("is_active")
    data["gateway_profile-0-role"] = "admin"
    response = admin_client.post(user_change, data)
    assert response.status_code == 302, response.content[:3000]
    actions = list(
        AuditEvent.objects.filter(actor=admin_user).order_by("id").values_list("action", "detail")
    )
    assert actions[1:] == [
        ("user_deactivated", {"before": {"active": True}, "after": {"active": False}}),
        ("role_changed", {"before": {"role": "reviewer"}, "after": {"role": "admin"}}),
    ]


def test_create_institution_admin_command_is_audited(world, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "pw-cli-long-enough")
    call_command(
        "create_institution_admin", "Institution a", "cli-admin", "--role", "reviewer", "--noinput"
    )
    event = AuditEvent.objects.get(action="user_created")
    assert event.actor_name == "manage.py create_institution_admin"
    assert event.detail["after"]["role"] == "reviewer"
    assert "pw-cli" not in json.dumps(event.detail)


@pytest.mark.parametrize("object_id", [str(2**64), "abc", "%00", "-1", "%ED%A0%80"])
def test_hostile_event_ids_are_404(world, admin_client, object_id):
    assert admin_client.get(f"{LIST}{object_id}/change/").status_code in (302, 404)
    superuser = User.objects.get(is_superuser=True)
    api = token_client(superuser)
    assert api.get(f"/manage/v1/audit/{object_id}").status_code == 404


def test_deleting_an_unused_active_key_is_audited_as_revoked(world, admin_client):
    from licensing.access.credentials import api_key_create

    row, _ = api_key_create(license=world["a"]["license"], name="spare")
    response = admin_client.post(url(ApiKey, "delete", row.pk), {"post": "yes"})
    assert response.status_code == 302 and not ApiKey.objects.filter(pk=row.pk).exists()
    event = AuditEvent.objects.get(action="api_key_revoked", target=f"api_key:{row.pk}")
    assert event.detail == {
        "prefix": row.prefix,
        "name": "spare",
        "license": world["a"]["license"].name,
        "via": "admin",
        "deleted": True,
    }


def test_create_license_command_is_audited(db, tmp_path):
    policy = tmp_path / "policy.json"
    from licensing.rules.policy import open_policy_document

    policy.write_text(json.dumps(open_policy_document()))
    call_command("create_license", "cli-class", "--limit", "5000", "--policy-file", str(policy))
    lic = License.objects.get(name="cli-class")
    events = {e.action: e for e in AuditEvent.objects.filter(actor_name="manage.py create_license")}
    assert events["budget_changed"].detail["after"]["budget_limit"] == 5000
    assert events["budget_changed"].detail["created"] is True
    assert events["policy_changed"].target == f"licensetype:{lic.license_type_id}"

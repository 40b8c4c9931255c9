"""An institution's admin erases a person (issue 39, GDPR Art. 17; licensing.access.erasure):
pseudonymised everywhere, keys revoked, sessions ended, every sum unchanged, with a
confirmation and an audit row; checked with the database's own counts before and after. Who
may erase (admins, superusers), who may not (reviewers, teachers, another institution), and a
person who is also staff."""

from __future__ import annotations

import json
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Count, Sum
from django.test import Client
from django.utils import timezone

from licensing.access.services import license_create
from licensing.models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    EndUser,
    IdentityProvider,
    SsoIdentity,
    Transaction,
    Wallet,
)
from licensing.portal.services import portal_key_create, terms_accept

pytestmark = pytest.mark.django_db

EMAIL = "ada.lovelace@hill.example"
SUBJECT = "idp-sub-4711"


def staff(name: str, institution, role: str | None, superuser=False):
    User = get_user_model()
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.test", "pw")
    user = User.objects.create_user(name, is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def erase_url(end_user) -> str:
    return f"/admin/licensing/enduser/{end_user.pk}/erase/"


@pytest.fixture
def world(db):
    license = license_create(
        name="hill-students", institution="Hill School", limit=5_000_000, strategy="per_user"
    )
    institution = license.institution
    user = get_user_model().objects.create_user(
        "ada", email=EMAIL, first_name="Ada", last_name="Lovelace", password="pw"
    )
    provider = IdentityProvider.objects.create(
        institution=institution, issuer="https://idp.hill.example", client_id="gw"
    )
    SsoIdentity.objects.create(provider=provider, subject=SUBJECT, user=user, email=EMAIL)
    student = EndUser.objects.create(license=license, subject=SUBJECT, user=user)
    terms_accept(end_user=student)
    key, secret = portal_key_create(end_user=student, name="Ada's laptop")
    wallet = Wallet.objects.create(
        license=license,
        holder=f"user:{student.pk}",
        period="monthly",
        window_start=timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0),
        unit="micro_credits",
        spent=21,
    )
    for credits in (5, 7, 9):
        Transaction.objects.create(
            request_id=uuid.uuid4().hex,
            license=license,
            api_key=key,
            end_user=student,
            wallet=wallet,
            service="chat_completions",
            requested_model="gpt-4o-mini",
            provider="direct",
            status_code=200,
            credits=credits,
            total_tokens=10,
            metadata={"user": EMAIL, "session": "abc"},
        )
    AuditEvent.objects.create(
        action=AuditEvent.Action.SIGN_IN,
        institution=institution,
        actor=user,
        actor_name=EMAIL,
        target=f"user:{user.pk}",
        detail={"email": EMAIL, "subject": SUBJECT, "groups": ["student"]},
    )
    other = license_create(name="vale", institution="Vale School", limit=1000, strategy="per_user")
    return {
        "license": license,
        "institution": institution,
        "user": user,
        "student": student,
        "key": key,
        "secret": secret,
        "wallet": wallet,
        "admin": staff("hill-admin", institution, AdminProfile.Role.ADMIN),
        "other_admin": staff("vale-admin", other.institution, AdminProfile.Role.ADMIN),
    }


def counts() -> dict:
    return {
        "transactions": Transaction.objects.aggregate(n=Count("id"), credits=Sum("credits")),
        "wallets": list(Wallet.objects.order_by("id").values_list("id", "spent")),
        "end_users": EndUser.objects.count(),
        "keys": ApiKey.objects.count(),
    }


def everything_kept() -> str:
    """Every text column the erasure could have left the person in, as one string."""
    parts = [
        json.dumps(list(AuditEvent.objects.values("actor_name", "detail", "target"))),
        json.dumps(list(Transaction.objects.values("metadata"))),
        json.dumps(list(EndUser.objects.values("subject"))),
        json.dumps(list(ApiKey.objects.values("name"))),
        json.dumps(
            list(get_user_model().objects.values("username", "email", "first_name", "last_name"))
        ),
        json.dumps(list(SsoIdentity.objects.values("subject", "email"))),
    ]
    return "".join(parts)


def test_an_admin_erases_a_person_and_every_sum_stays(world):
    student, user = world["student"], world["user"]
    assert EMAIL in everything_kept() and SUBJECT in everything_kept()
    before = counts()
    portal = client_of(user)
    assert portal.get("/portal/").status_code == 200
    admin = client_of(world["admin"])

    page = admin.get(f"/admin/licensing/enduser/{student.pk}/change/").content.decode()
    assert f'href="{erase_url(student)}"' in page
    page = admin.get(erase_url(student))
    assert page.status_code == 200
    assert "1 active key is revoked" in page.content.decode()
    assert "3 usage records keep their cost" in page.content.decode()

    wrong = admin.post(erase_url(student), {"confirm": "erase"})
    assert wrong.status_code == 400 and 'id="erase-error"' in wrong.content.decode()
    assert EndUser.objects.get(pk=student.pk).subject == SUBJECT

    done = admin.post(erase_url(student), {"confirm": "ERASE"})
    assert done.status_code == 302

    assert counts() == {**before, "transactions": before["transactions"]}
    student.refresh_from_db()
    assert student.subject.startswith("erased-") and student.user is None
    assert not student.active and student.terms_accepted_at is None
    assert not ApiKey.objects.filter(end_user=student, active=True).exists()
    user.refresh_from_db()
    assert user.username == student.subject and not user.is_active
    assert (user.email, user.first_name, user.last_name) == ("", "", "")
    assert not user.has_usable_password()
    assert not SsoIdentity.objects.exists()
    assert all(row == {} for row in Transaction.objects.values_list("metadata", flat=True))
    kept = everything_kept()
    assert EMAIL not in kept and SUBJECT not in kept and "Lovelace" not in kept
    assert "Ada's laptop" not in kept
    assert portal.get("/portal/").status_code == 302  # the session ended

    (event,) = AuditEvent.objects.filter(action=AuditEvent.Action.PERSON_ERASED)
    assert event.actor == world["admin"] and event.target == f"end_user:{student.pk}"
    assert event.detail == {
        "pseudonym": student.subject,
        "keys_revoked": 1,
        "sessions_ended": 1,
        "ledger_rows_cleaned": 3,
        "audit_rows_pseudonymised": 2,
        "safeguarding_alerts_deleted": 0,
    }
    again = admin.get(erase_url(student)).content.decode()
    assert 'id="erase-refused"' in again and "erased already" in again


@pytest.mark.parametrize("role", [AdminProfile.Role.REVIEWER, AdminProfile.Role.TEACHER])
def test_reviewers_and_teachers_may_not_erase(world, role):
    student = world["student"]
    client = client_of(staff(f"r-{role}", world["institution"], role))
    page = client.get(f"/admin/licensing/enduser/{student.pk}/change/")
    assert erase_url(student) not in page.content.decode()
    assert client.get(erase_url(student)).status_code in (403, 404)
    assert client.post(erase_url(student), {"confirm": "ERASE"}).status_code in (403, 404)
    assert EndUser.objects.get(pk=student.pk).subject == SUBJECT


@pytest.mark.parametrize("object_id", ["999999", str(2**64), "-1", "abc", "%00", "1%00"])
def test_another_institution_and_impossible_ids_are_404(world, object_id):
    other = client_of(world["other_admin"])
    assert other.get(erase_url(world["student"])).status_code == 404
    assert other.post(erase_url(world["student"]), {"confirm": "ERASE"}).status_code == 404
    answer = client_of(world["admin"]).get(f"/admin/licensing/enduser/{object_id}/erase/")
    assert answer.status_code in (404, 302)
    assert EndUser.objects.get(pk=world["student"].pk).subject == SUBJECT


def test_a_person_who_is_also_staff_is_refused(world):
    user = world["user"]
    AdminProfile.objects.create(user=user, institution=world["institution"], role="teacher")
    admin = client_of(world["admin"])
    page = admin.get(erase_url(world["student"])).content.decode()
    assert 'id="erase-refused"' in page and "staff" in page
    assert admin.post(erase_url(world["student"]), {"confirm": "ERASE"}).status_code == 400
    assert EndUser.objects.get(pk=world["student"].pk).subject == SUBJECT


def test_a_superuser_erases_too(world):
    root = client_of(staff("root", None, None, superuser=True))
    assert root.post(erase_url(world["student"]), {"confirm": "ERASE"}).status_code == 302
    assert EndUser.objects.get(pk=world["student"].pk).subject.startswith("erased-")


def test_open_safeguarding_alerts_come_first_closed_ones_go(world):
    from licensing.models import SafeguardingAlert

    student = world["student"]
    common = {"institution": world["institution"], "end_user": student, "direction": "input"}
    closed = SafeguardingAlert.objects.create(
        **common, content='["closed"]', status=SafeguardingAlert.Status.CLOSED
    )
    open_one = SafeguardingAlert.objects.create(**common, content='["open"]')
    admin = client_of(world["admin"])
    page = admin.get(erase_url(student)).content.decode()
    assert 'id="erase-refused"' in page and "not closed" in page
    assert admin.post(erase_url(student), {"confirm": "ERASE"}).status_code == 400
    open_one.status = SafeguardingAlert.Status.CLOSED
    open_one.save()
    assert admin.post(erase_url(student), {"confirm": "ERASE"}).status_code == 302
    assert not SafeguardingAlert.objects.filter(pk__in=[closed.pk, open_one.pk]).exists()
    event = AuditEvent.objects.get(action=AuditEvent.Action.PERSON_ERASED)
    assert event.detail["safeguarding_alerts_deleted"] == 2

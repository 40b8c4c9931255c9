"""The Django admin: every page renders, credentials stay hidden, API keys are shown once,
bad policy documents are refused and the ledger is read-only."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from catalog.models import Connection, Model, Provider, ProviderModel
from core.crypto import reveal
from licensing.models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    BudgetAlert,
    Colleague,
    Course,
    CourseMember,
    CourseTeacher,
    CourseWindow,
    EndUser,
    IdentityProvider,
    Institution,
    JwtIssuer,
    License,
    LicenseType,
    LtiIdentity,
    LtiLaunchState,
    LtiPlatform,
    SafeguardingAlert,
    SafeguardingSettings,
    ScimGroup,
    ScimToken,
    ScimUser,
    SsoIdentity,
    Transaction,
    Wallet,
)
from tests.kit import fresh, rows_made_once

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

UPSTREAM_SECRET = "sk-upstream-SECRET-do-not-show-1234567890"
AWS_SECRET = "aws-SECRET-do-not-show-abcdefghijklmnop"
HS_SECRET = "hs256-SECRET-do-not-show-0987654321"
KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")

# Models a superuser may add through the admin; the others are created by the API.
ADDABLE = {
    Provider,
    Connection,
    Model,
    ProviderModel,
    Institution,
    LicenseType,
    License,
    ApiKey,
    JwtIssuer,
    AdminProfile,
    IdentityProvider,
    Colleague,
    Course,
    LtiPlatform,
    ScimToken,
    SafeguardingSettings,
}
# Safeguarding alerts: raised by the gateway only (never added), handled on their change page.
READ_ONLY = {EndUser, Wallet, Transaction, BudgetAlert, SsoIdentity, AuditEvent, SafeguardingAlert}
READ_ONLY |= {LtiIdentity, LtiLaunchState, ScimUser, ScimGroup}
# Added on the course's page only (where the course services' checks run); changed or deleted
# on their own pages too.
ADDED_ON_THE_COURSE_PAGE = {CourseWindow, CourseMember, CourseTeacher}
ALL_MODELS = sorted(ADDABLE | READ_ONLY | ADDED_ON_THE_COURSE_PAGE, key=lambda m: m._meta.label)


def url(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


class _FormParser(HTMLParser):
    """The fields of the admin form (id `..._form`) as a browser would submit them."""

    def __init__(self):
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self.in_form = False
        self._select: str | None = None
        self._select_multiple = False
        self._textarea: str | None = None

    def _add(self, name, value):
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and (a.get("id") or "").endswith("_form"):
            self.in_form = True
        if not self.in_form or not a.get("name"):
            if tag == "option" and self._select is not None and "selected" in a:
                self._add(self._select, a.get("value", ""))
            return
        name = a["name"]
        if tag == "input":
            kind = a.get("type", "text")
            if kind in ("submit", "button", "file"):
                return
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self._add(name, a.get("value", "on"))
                return
            self._add(name, a.get("value", ""))
        elif tag == "select":
            self._select = name
        elif tag == "textarea":
            self._textarea = name
            self._add(name, "")

    def handle_data(self, data):
        if self._textarea is not None:
            self.data[self._textarea][-1] += data

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self.in_form = False


def form_data(response) -> dict:
    parser = _FormParser()
    parser.feed(response.content.decode())
    data = {k: v if len(v) > 1 else v[0] for k, v in parser.data.items()}
    data.pop("csrfmiddlewaretoken", None)
    # Textareas start with a newline Django adds after the tag.
    return {k: v.removeprefix("\n") if isinstance(v, str) else v for k, v in data.items()}


def make_licensing(suffix: str) -> dict:
    """One of each licensing row."""
    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create

    lic = license_create(
        name=f"license-{suffix}",
        institution=f"Institution {suffix}",
        limit=1_000_000,
        period="monthly",
        strategy="per_user",
    )
    key_row, key = api_key_create(license=lic, name=f"key {suffix}")
    issuer = JwtIssuer.objects.create(
        institution=lic.institution,
        license=lic,
        issuer=f"https://idp-{suffix}.example",
        audience="gateway",
        algorithms=["HS256"],
        hs256_secret=HS_SECRET,
    )
    user = EndUser.objects.create(license=lic, issuer=issuer, subject=f"user-{suffix}")
    wallet = Wallet.objects.create(
        license=lic,
        holder=f"user:{user.pk}",
        period="monthly",
        window_start=timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0),
        unit="micro_credits",
        spent=1234,
    )
    txs = [
        Transaction.objects.create(
            request_id=f"req-{suffix}-{i}",
            license=lic,
            api_key=key_row,
            end_user=user,
            wallet=wallet,
            service="embeddings",
            requested_model="text-embedding-3-small",
            billed_model="text-embedding-3-small",
            provider="direct",
            connection="default",
            status_code=200,
            prompt_tokens=10,
            total_tokens=10,
            credits=1,
            metadata={"team": suffix},
        )
        for i in range(3)
    ]
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_user(f"staff-{suffix}", is_staff=True)
    profile = AdminProfile.objects.create(user=staff, institution=lic.institution)
    from licensing.access.audit import audit_event_record

    event = audit_event_record(
        action=AuditEvent.Action.ROLE_CHANGED,
        actor=staff,
        institution=lic.institution,
        target=f"user:{staff.pk}",
        detail={"before": {"role": "reviewer"}, "after": {"role": "admin"}},
    )
    course = Course.objects.create(
        institution=lic.institution, license=lic, code=f"CS-{suffix}", name=f"Course {suffix}"
    )
    window = CourseWindow.objects.create(
        course=course,
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(days=1),
    )
    member = CourseMember.objects.create(course=course, end_user=user)
    teacher = CourseTeacher.objects.create(course=course, user=staff)
    lms = LtiPlatform.objects.create(  # a public IP literal: no DNS lookup in the URL check
        institution=lic.institution,
        license=lic,
        issuer="https://93.184.215.14",
        client_id=f"tool-{suffix}",
        deployment_ids=["1"],
        jwks_url="https://93.184.215.14/jwks",
        auth_login_url="https://93.184.215.14/auth",
    )
    lti_identity = LtiIdentity.objects.create(platform=lms, subject=f"lti-{suffix}", user=staff)
    lti_launch = LtiLaunchState.objects.create(platform=lms, state=suffix, nonce=suffix)
    alert = BudgetAlert.objects.create(
        license=lic,
        period="monthly",
        window_start=wallet.window_start,
        holder=wallet.holder,
        spent=900_000,
        threshold=800_000,
        limit=1_000_000,
    )
    scim = make_scim(lic.institution, suffix)
    safeguarding = SafeguardingSettings.objects.create(institution=lic.institution, enabled=True)
    flagged = SafeguardingAlert.objects.create(
        institution=lic.institution,
        course=course,
        end_user=user,
        direction="input",
        categories=["violence"],
        scores={"violence": 0.93},
        content='["a flagged message"]',
    )
    return {
        **scim,
        "safeguarding_settings": safeguarding,
        "safeguarding_alert": flagged,
        "license": lic,
        "license_type": lic.license_type,
        "admin_profile": profile,
        "colleague": Colleague.objects.get(pk=staff.pk),
        "audit_event": event,
        "course": course,
        "course_window": window,
        "course_member": member,
        "course_teacher": teacher,
        "lti_platform": lms,
        "lti_identity": lti_identity,
        "lti_launch": lti_launch,
        "budget_alert": alert,
        "institution": lic.institution,
        "api_key": key_row,
        "key": key,
        "issuer": issuer,
        "end_user": user,
        "wallet": wallet,
        "transaction": txs[0],
    }


def make_scim(institution, suffix: str) -> dict:
    """A SCIM token, a provisioned person and their group (as /scim/v2/ makes them)."""
    token = ScimToken.objects.create(
        institution=institution,
        prefix=f"scim-{suffix}",
        digest=hashlib.sha256(b"x" + suffix.encode()).hexdigest(),
    )
    person = get_user_model().objects.create_user(f"scim-{suffix}", email=f"p@{suffix}.example")
    scim_user = ScimUser.objects.create(
        institution=institution,
        user=person,
        user_name=f"pupil@{suffix}.example",
        external_id=f"ext-{suffix}",
        resource={"userName": f"pupil@{suffix}.example", "displayName": f"Pupil {suffix}"},
    )
    group = ScimGroup.objects.create(institution=institution, display_name=f"pupils-{suffix}")
    group.members.add(scim_user)
    return {
        "scim_token": token,
        "scim_user": scim_user,
        "scim_group": group,
    }


@pytest.fixture(scope="module")
def _objects(django_db_setup, django_db_blocker):
    with rows_made_once(django_db_blocker, make_objects) as rows:
        yield rows


@pytest.fixture
def objects(db, _objects):
    """One of each row the admin shows, made once for the module (tests/kit.py)."""
    return fresh(_objects)


def make_objects() -> dict:
    from catalog.services import catalog_load_defaults, connection_configure

    catalog_load_defaults()
    conn = connection_configure(
        provider_slug="direct", base_url="https://api.example.test/v1", api_key=UPSTREAM_SECRET
    )
    aws = connection_configure(
        provider_slug="cloud",
        base_url="https://bedrock.example.test",
        region="us-east-1",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key=AWS_SECRET,
    )
    found = make_licensing("a")
    found.update(
        connection=conn,
        aws_connection=aws,
        provider=conn.provider,
        model=Model.objects.get(model_id="text-embedding-3-small"),
        provider_row=ProviderModel.objects.filter(model__model_id="text-embedding-3-small").first(),
    )
    idp = IdentityProvider.objects.create(
        institution=found["license"].institution,
        issuer="https://idp.a.example.edu",
        client_id="gateway",
        client_secret="idp-SECRET-do-not-show",
    )
    found["identity_provider"] = idp
    found["sso_identity"] = SsoIdentity.objects.create(
        provider=idp, subject="sub-a", user=get_user_model().objects.create_user("sso-a")
    )
    return found


def instance_of(objects, model):
    return next(v for v in objects.values() if type(v) is model)


# --- every page renders ----------------------------------------------------------------------


# Models with no admin page: SAML's used assertion ids (written by sign-ins, read by none) and
# the budget holds of requests in flight (shown as their sum, each wallet's "reserved").
NO_ADMIN_PAGE = {"SamlAssertionUse", "Reservation"}


def test_every_model_is_registered():
    from django.apps import apps

    for label in ("catalog", "licensing"):
        for model in apps.get_app_config(label).get_models():
            if model.__name__ not in NO_ADMIN_PAGE:
                assert model in admin.site._registry, model
    assert set(ALL_MODELS) == {
        m for m in admin.site._registry if m._meta.app_label in ("catalog", "licensing")
    }


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_changelist_add_and_change_pages(admin_client, objects, model):
    assert admin_client.get(url(model, "changelist")).status_code == 200
    add = admin_client.get(url(model, "add"))
    assert add.status_code == (200 if model in ADDABLE else 403)
    obj = instance_of(objects, model)
    change = admin_client.get(url(model, "change", obj.pk))
    assert change.status_code == 200
    assert change.context["original"] == obj


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_changelist_search_and_filters_render(admin_client, objects, model):
    model_admin = admin.site._registry[model]
    if model_admin.search_fields:
        assert admin_client.get(url(model, "changelist"), {"q": "a"}).status_code == 200
    for spec in model_admin.list_filter:
        field = spec if isinstance(spec, str) else spec[0]
        response = admin_client.get(url(model, "changelist"), {f"{field}__isnull": "False"})
        assert response.status_code == 200, field


def _changelist_queries(client, model) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url(model, "changelist"))
    assert response.status_code == 200
    return len(ctx.captured_queries)


def test_changelists_make_no_n_plus_one_queries(admin_client, objects):
    before = {model: _changelist_queries(admin_client, model) for model in ALL_MODELS}
    for suffix in ("b", "c", "d"):
        make_licensing(suffix)
    for slug in ("aggregator", "multimodal", "websearch"):
        Connection.objects.create(
            provider=Provider.objects.get(slug=slug), base_url="https://x.example.test", api_key="k"
        )
    after = {model: _changelist_queries(admin_client, model) for model in ALL_MODELS}
    assert after == before


# --- connection credentials ------------------------------------------------------------------


def test_connection_credentials_never_rendered(admin_client, objects):
    listing = admin_client.get(url(Connection, "changelist")).content.decode()
    assert UPSTREAM_SECRET not in listing and AWS_SECRET not in listing
    assert "direct" in listing and "cloud" in listing
    for conn in (objects["connection"], objects["aws_connection"]):
        page = admin_client.get(url(Connection, "change", conn.pk)).content.decode()
        assert UPSTREAM_SECRET not in page and AWS_SECRET not in page
        assert 'type="password"' in page
        assert "clear_api_key" in page and "clear_aws_secret_access_key" in page
    provider_page = admin_client.get(url(Provider, "changelist")).content.decode()
    assert UPSTREAM_SECRET not in provider_page


def test_connection_blank_key_keeps_the_stored_one(admin_client, objects):
    conn = objects["connection"]
    change = url(Connection, "change", conn.pk)
    data = form_data(admin_client.get(change))
    assert data["api_key"] == ""
    data["base_url"] = "https://other.example.test/v1"
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    conn.refresh_from_db()
    assert reveal(conn.api_key) == UPSTREAM_SECRET
    assert conn.base_url == "https://other.example.test/v1"
    entry = LogEntry.objects.filter(object_id=str(conn.pk)).latest("action_time")
    assert UPSTREAM_SECRET not in entry.change_message
    assert "API key" not in entry.get_change_message()  # unchanged, so not reported


def test_connection_new_key_replaces_and_clear_removes(admin_client, objects):
    conn = objects["connection"]
    change = url(Connection, "change", conn.pk)
    data = form_data(admin_client.get(change))
    data["api_key"] = "sk-upstream-new"
    assert admin_client.post(change, data).status_code == 302
    conn.refresh_from_db()
    assert reveal(conn.api_key) == "sk-upstream-new"

    data = form_data(admin_client.get(change))
    data["clear_api_key"] = "on"
    assert admin_client.post(change, data).status_code == 302
    conn.refresh_from_db()
    assert conn.api_key == ""
    assert not conn.has_credentials

    # The AWS secret behaves the same; the other connection is untouched.
    aws = objects["aws_connection"]
    aws_change = url(Connection, "change", aws.pk)
    data = form_data(admin_client.get(aws_change))
    data["clear_aws_secret_access_key"] = "on"
    assert admin_client.post(aws_change, data).status_code == 302
    aws.refresh_from_db()
    assert aws.aws_secret_access_key == "" and aws.aws_access_key_id == "AKIAEXAMPLE"


def test_connection_new_key_and_clear_together_is_refused(admin_client, objects):
    conn = objects["connection"]
    change = url(Connection, "change", conn.pk)
    data = form_data(admin_client.get(change))
    data.update(api_key="sk-typed-by-mistake", clear_api_key="on")
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "clear_api_key" in response.context["adminform"].form.errors
    page = response.content.decode()
    assert "sk-typed-by-mistake" not in page and UPSTREAM_SECRET not in page
    conn.refresh_from_db()
    assert reveal(conn.api_key) == UPSTREAM_SECRET


def test_connection_add_form_stores_the_key(admin_client, objects):
    provider = Provider.objects.get(slug="aggregator")
    data = form_data(admin_client.get(url(Connection, "add")))
    data.update(
        provider=str(provider.pk),
        name="backup",
        base_url="https://or.example.test",
        api_key="sk-or-key",
    )
    assert admin_client.post(url(Connection, "add"), data).status_code == 302
    assert Connection.objects.get(provider=provider, name="backup").api_key.reveal() == "sk-or-key"


def test_jwt_issuer_secret_is_write_only(admin_client, objects):
    issuer = objects["issuer"]
    change = url(JwtIssuer, "change", issuer.pk)
    assert HS_SECRET not in admin_client.get(url(JwtIssuer, "changelist")).content.decode()
    response = admin_client.get(change)
    assert HS_SECRET not in response.content.decode()
    data = form_data(response)
    data["audience"] = "gateway-2"
    assert admin_client.post(change, data).status_code == 302
    issuer.refresh_from_db()
    assert reveal(issuer.hs256_secret) == HS_SECRET and issuer.audience == "gateway-2"
    # Clearing the only key material is refused by JwtIssuer.clean().
    data["clear_hs256_secret"] = "on"
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "HS256 secret" in response.content.decode()
    issuer.refresh_from_db()
    assert reveal(issuer.hs256_secret) == HS_SECRET


# --- catalog editing -------------------------------------------------------------------------


def test_model_change_form_edits_json_and_inline_rows(admin_client, objects):
    model = objects["model"]
    change = url(Model, "change", model.pk)
    data = form_data(admin_client.get(change))
    assert json.loads(data["cost"]) == model.cost
    data["cost"] = json.dumps({"type": "per_token", "prompt": 0.05})
    data["options"] = ""  # emptied: saved as the default {}
    rows = int(data["provider_rows-TOTAL_FORMS"])
    assert rows >= 1
    data["provider_rows-0-priority"] = "7"
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    model.refresh_from_db()
    assert model.cost == {"type": "per_token", "prompt": 0.05}
    assert model.options == {}
    assert model.provider_rows.order_by("pk").filter(priority=7).exists()

    data["cost"] = "{not json"
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "cost" in response.context["adminform"].form.errors


def test_provider_row_actions(admin_client, objects):
    rows = list(ProviderModel.objects.filter(model__model_id__startswith="text-embedding"))
    ids = [str(r.pk) for r in rows]
    changelist = url(ProviderModel, "changelist")
    response = admin_client.post(changelist, {"action": "deactivate", "_selected_action": ids})
    assert response.status_code == 302
    assert not ProviderModel.objects.filter(pk__in=ids, active=True).exists()
    admin_client.post(changelist, {"action": "activate", "_selected_action": ids})
    assert ProviderModel.objects.filter(pk__in=ids, active=True).count() == len(ids)


# --- API keys --------------------------------------------------------------------------------


def test_api_key_add_shows_the_key_once_and_it_authenticates(admin_client, objects):
    from licensing.access.credentials import resolve_credential

    lic = objects["license"]
    add = url(ApiKey, "add")
    page = admin_client.get(add).content.decode()
    assert 'name="prefix"' not in page and 'name="digest"' not in page
    data = form_data(admin_client.get(add))
    data.update(license=str(lic.pk), name="from the admin", active="on")
    response = admin_client.post(add, data, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"] if KEY_RE.search(str(m))]
    assert len(shown) == 1
    key = KEY_RE.search(shown[0]).group(0)
    assert key in response.content.decode()

    row = ApiKey.objects.get(name="from the admin")
    assert row.license == lic
    assert row.prefix == key[:15] and key.startswith(row.prefix)
    assert row.digest == hashlib.sha256(key.encode()).hexdigest()
    stored = [str(getattr(row, f.attname)) for f in ApiKey._meta.concrete_fields]
    assert key not in stored

    principal = resolve_credential(key)
    assert principal is not None
    assert principal.api_key_id == row.pk and principal.license.id == lic.pk

    # Never again: not on its change page, not in the list.
    again = admin_client.get(url(ApiKey, "change", row.pk)).content.decode()
    assert key not in again and row.prefix in again
    assert key not in admin_client.get(url(ApiKey, "changelist")).content.decode()


def test_api_key_prefix_and_digest_are_not_editable(admin_client, objects):
    row = objects["api_key"]
    change = url(ApiKey, "change", row.pk)
    data = form_data(admin_client.get(change))
    assert "prefix" not in data and "digest" not in data and "license" not in data
    data.update(name="renamed", prefix="sk-svc-hacked", digest="0" * 64)
    data.pop("active", None)  # unticked: deactivate
    assert admin_client.post(change, data).status_code == 302
    before_prefix, before_digest = row.prefix, row.digest
    row.refresh_from_db()
    assert (row.name, row.active) == ("renamed", False)
    assert (row.prefix, row.digest) == (before_prefix, before_digest)


def test_api_key_add_inactive_with_expiry(admin_client, objects):
    data = form_data(admin_client.get(url(ApiKey, "add")))
    expires = timezone.now() + timedelta(days=30)
    data.update(
        license=str(objects["license"].pk),
        name="expiring",
        expires_at_0=expires.strftime("%Y-%m-%d"),
        expires_at_1="12:00:00",
    )
    data.pop("active", None)
    assert admin_client.post(url(ApiKey, "add"), data).status_code == 302
    row = ApiKey.objects.get(name="expiring")
    assert not row.active and row.expires_at is not None


# --- license types: policy and guardrails validated on save ----------------------------------


BAD_POLICIES = [
    ({"version": 2}, "Unsupported policy version"),
    (
        {"version": 1, "services": {"embeddings": {"params": {"dimensions": {"maximum": 5}}}}},
        "unknown rule keys",
    ),
    ({"version": 1, "services": {"teleport": {}}}, "Unknown service"),
]


@pytest.mark.parametrize(("policy", "message"), BAD_POLICIES)
def test_license_type_bad_policy_is_refused(admin_client, objects, policy, message):
    license_type = objects["license_type"]
    saved = LicenseType.objects.get(pk=license_type.pk)
    change = url(LicenseType, "change", license_type.pk)
    data = form_data(admin_client.get(change))
    data["policy"] = json.dumps(policy)
    data["name"] = "renamed"
    response = admin_client.post(change, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors["policy"])
    assert message in response.content.decode()
    fresh = LicenseType.objects.get(pk=license_type.pk)
    assert (fresh.name, fresh.policy, fresh.updated_at) == (
        saved.name,
        saved.policy,
        saved.updated_at,
    )


def test_license_type_bad_guardrails_and_bad_json_are_refused(admin_client, objects):
    license_type = objects["license_type"]
    change = url(LicenseType, "change", license_type.pk)
    data = form_data(admin_client.get(change))
    data["guardrails"] = json.dumps({"input": {"patterns": ["("]}})
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "guardrails" in response.context["adminform"].form.errors
    data["guardrails"] = "{}"
    data["policy"] = "{not json"
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "policy" in response.context["adminform"].form.errors
    license_type.refresh_from_db()
    assert license_type.guardrails == {}


def test_license_type_add_with_bad_policy_saves_nothing(admin_client, objects):
    count = LicenseType.objects.count()
    data = form_data(admin_client.get(url(LicenseType, "add")))
    data.update(name="broken", policy=json.dumps({"version": 2}))
    response = admin_client.post(url(LicenseType, "add"), data)
    assert response.status_code == 200
    assert "policy" in response.context["adminform"].form.errors
    assert LicenseType.objects.count() == count


def test_license_type_valid_edit_saves(admin_client, objects):
    license_type = objects["license_type"]
    change = url(LicenseType, "change", license_type.pk)
    data = form_data(admin_client.get(change))
    policy = {
        "version": 1,
        "services": {
            "embeddings": {"providers": ["direct"], "params": {"dimensions": {"max": 64}}}
        },
    }
    data["policy"] = json.dumps(policy)
    data["guardrails"] = ""  # emptied: no guardrails
    assert admin_client.post(change, data).status_code == 302
    license_type.refresh_from_db()
    assert license_type.policy == policy and license_type.guardrails == {}


def test_license_form_checks_budget(admin_client, objects):
    lic = objects["license"]
    change = url(License, "change", lic.pk)
    data = form_data(admin_client.get(change))
    data["budget_limit"] = "-5"
    data["budget_unit"] = "dollars"
    response = admin_client.post(change, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "budget_limit" in errors and "budget_unit" in errors
    lic.refresh_from_db()
    assert lic.budget_limit == 1_000_000


# --- the ledger and other read-only models ---------------------------------------------------


def test_transactions_are_read_only(admin_client, objects):
    tx = objects["transaction"]
    assert admin_client.get(url(Transaction, "add")).status_code == 403
    assert admin_client.post(url(Transaction, "add"), {"request_id": "x"}).status_code == 403

    change = url(Transaction, "change", tx.pk)
    page = admin_client.get(change)
    assert page.status_code == 200
    assert 'name="credits"' not in page.content.decode()  # shown read-only, not as an input
    response = admin_client.post(
        change, {"credits": "999", "status_code": "500", "request_id": "forged"}
    )
    assert response.status_code == 403
    fresh = Transaction.objects.get(pk=tx.pk)
    assert (fresh.credits, fresh.status_code, fresh.request_id) == (1, 200, tx.request_id)

    delete = url(Transaction, "delete", tx.pk)
    assert admin_client.get(delete).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    bulk = admin_client.post(
        url(Transaction, "changelist"),
        {"action": "delete_selected", "_selected_action": [str(tx.pk)], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)
    assert Transaction.objects.filter(pk=tx.pk).exists()


def test_transaction_changelist_filters_and_search(admin_client, objects):
    tx = objects["transaction"]
    changelist = url(Transaction, "changelist")
    response = admin_client.get(changelist, {"q": tx.request_id})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [tx]
    response = admin_client.get(
        changelist,
        {
            "service": "embeddings",
            "provider": "direct",
            "status_code": "200",
            "license__id__exact": str(tx.license_id),
        },
    )
    assert response.status_code == 200
    assert response.context["cl"].result_count == 3
    today = timezone.now()
    response = admin_client.get(
        changelist, {"created_at__year": today.year, "created_at__month": today.month}
    )
    assert response.status_code == 200


@pytest.mark.parametrize("model", [Wallet, EndUser], ids=lambda m: m.__name__)
def test_wallets_and_end_users_cannot_be_edited(admin_client, objects, model):
    obj = instance_of(objects, model)
    response = admin_client.post(url(model, "change", obj.pk), {"spent": "0", "subject": "x"})
    assert response.status_code == 403
    obj.refresh_from_db()
    assert getattr(obj, "spent", 1234) == 1234 and getattr(obj, "subject", "user-a") == "user-a"


def test_wallets_cannot_be_deleted(admin_client, objects):
    wallet = objects["wallet"]
    assert admin_client.post(url(Wallet, "delete", wallet.pk), {"post": "yes"}).status_code == 403
    assert Wallet.objects.filter(pk=wallet.pk).exists()


@pytest.mark.parametrize("name", ["api_key", "end_user", "issuer"])
def test_rows_the_ledger_points_at_cannot_be_deleted(admin_client, objects, name):
    obj = objects[name]
    model = type(obj)
    assert admin_client.get(url(model, "delete", obj.pk)).status_code == 403
    assert admin_client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
    bulk = admin_client.post(
        url(model, "changelist"),
        {"action": "delete_selected", "_selected_action": [str(obj.pk)], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)
    assert model.objects.filter(pk=obj.pk).exists()
    assert Transaction.objects.filter(license=objects["license"]).count() == 3


def test_unused_keys_and_end_users_can_be_deleted(admin_client, objects):
    from licensing.access.credentials import api_key_create

    key_row, _ = api_key_create(license=objects["license"], name="unused")
    user = EndUser.objects.create(
        license=objects["license"], issuer=objects["issuer"], subject="unused"
    )
    for obj in (key_row, user):
        model = type(obj)
        assert admin_client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 302
        assert not model.objects.filter(pk=obj.pk).exists()


def test_license_change_saves_with_read_only_key_inline(admin_client, objects):
    lic = objects["license"]
    change = url(License, "change", lic.pk)
    data = form_data(admin_client.get(change))
    assert data["api_keys-TOTAL_FORMS"] == "1"
    data.update(budget_limit="", budget_period="daily")
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    lic.refresh_from_db()
    assert lic.budget_limit is None and lic.budget_period == "daily"
    assert lic.api_keys.count() == 1


def test_license_type_of_another_institution_is_refused(admin_client, objects):
    lic = objects["license"]
    other = LicenseType.objects.create(
        institution=Institution.objects.create(name="Elsewhere"), name="Elsewhere only"
    )
    change = url(License, "change", lic.pk)
    data = form_data(admin_client.get(change))
    data["license_type"] = str(other.pk)
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "license_type" in response.context["adminform"].form.errors
    lic.refresh_from_db()
    assert lic.license_type_id == objects["license_type"].pk


def test_the_wallet_list_shows_what_requests_in_progress_hold(admin_client, objects):
    """Issue 40's holds: counted as spent until charged, so a reviewer sees why a request was
    refused while `spent` is below the limit."""
    from django.utils import translation

    Wallet.objects.filter(pk=objects["wallet"].pk).update(reserved=4_321)
    with translation.override("de"):
        page = admin_client.get(url(Wallet, "changelist"), HTTP_ACCEPT_LANGUAGE="de")
    assert page.status_code == 200
    text = page.content.decode()
    assert ">Vorgemerkt<" in text  # the column of the holds
    assert "0,0043 USD (4.321 Mikro-Credits)" in text


def test_the_wallet_list_names_each_period_in_the_readers_language(admin_client, objects):
    """A license's periods (monthly) and a course allowance's (week) by their models' own
    translated labels, in the column and in the filter, which still narrows the list."""
    from django.utils import translation

    lic = objects["wallet"].license
    Wallet.objects.create(
        license=lic,
        holder="course:1:user:1",
        period="week",
        window_start=objects["wallet"].window_start,
        unit="micro_credits",
    )
    with translation.override("de"):
        page = admin_client.get(url(Wallet, "changelist"), HTTP_ACCEPT_LANGUAGE="de")
        weekly = admin_client.get(url(Wallet, "changelist") + "?period=week")
    text = page.content.decode()
    assert ">Monatlich<" in text and ">Woche<" in text  # in the rows
    assert "?period=week" in text and "?period=monthly" in text  # the filter's choices
    assert ">monthly<" not in text and ">week<" not in text
    assert weekly.status_code == 200
    assert [w.period for w in weekly.context["cl"].result_list] == ["week"]

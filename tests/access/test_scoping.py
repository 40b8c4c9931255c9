"""Institution scoping of the admin: each role, logged in, walks every changelist, change, add,
delete and history URL of the other institution's objects (404, nothing changed), and its own
institution's pages work; FK choices, autocomplete, filters, search and actions are scoped."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from catalog.models import Connection, Model, Provider, ProviderModel
from licensing.access.scoping import ROLE_PERMISSIONS
from licensing.models import (
    AdminProfile,
    ApiKey,
    BudgetAlert,
    EndUser,
    Institution,
    JwtIssuer,
    License,
    LicenseType,
    ScimGroup,
    ScimToken,
    ScimUser,
    Transaction,
    Wallet,
)

from ..console.test_admin import form_data, url

# The admin's querysets, filters and search per institution: on CI's SQLite pass too.
pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

SCOPED_MODELS = [
    Institution,
    LicenseType,
    License,
    ApiKey,
    JwtIssuer,
    EndUser,
    Wallet,
    Transaction,
    BudgetAlert,
    ScimToken,
    ScimUser,
    ScimGroup,
]
FIELD_OF = {
    Institution: "institution",
    LicenseType: "license_type",
    License: "license",
    ApiKey: "api_key",
    JwtIssuer: "issuer",
    EndUser: "end_user",
    Wallet: "wallet",
    Transaction: "transaction",
    BudgetAlert: "budget_alert",
    ScimToken: "scim_token",
    ScimUser: "scim_user",
    ScimGroup: "scim_group",
}


def login_as(role: str, institution: Institution) -> Client:
    user = get_user_model().objects.create_user(f"{role}-user", password="pw", is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    client = Client()
    client.force_login(user)
    return client


def _snapshot(obj):
    fresh = type(obj).objects.filter(pk=obj.pk).values().first()
    return fresh


@pytest.mark.parametrize("role", ["admin", "reviewer"])
@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_other_institutions_objects_are_404_everywhere(world, role, model):
    client = login_as(role, world["a"]["institution"])
    other = world["b"][FIELD_OF[model]]
    before = _snapshot(other)
    may = ROLE_PERMISSIONS[role].get(model, frozenset())

    listing = client.get(url(model, "changelist"))
    if "view" in may:
        assert listing.status_code == 200
        shown = list(listing.context["cl"].result_list)
        assert other not in shown
        assert shown, "its own institution's rows are listed"
    else:
        assert listing.status_code == 403

    for view in ("change", "delete"):
        needed = "view" if view == "change" else "delete"
        expected = 404 if needed in may else 403
        assert client.get(url(model, view, other.pk)).status_code == expected, view
    assert client.get(url(model, "history", other.pk)).status_code == 404
    post_change = client.post(url(model, "change", other.pk), {"name": "stolen", "active": ""})
    assert post_change.status_code == (404 if "change" in may else 403)
    post_delete = client.post(url(model, "delete", other.pk), {"post": "yes"})
    assert post_delete.status_code == (404 if "delete" in may else 403)
    assert _snapshot(other) == before
    assert client.get(url(model, "add")).status_code == (200 if "add" in may else 403)


@pytest.mark.parametrize("role", ["admin", "reviewer"])
def test_own_objects_open_as_the_role_allows(world, role):
    client = login_as(role, world["a"]["institution"])
    for model in SCOPED_MODELS:
        own = world["a"][FIELD_OF[model]]
        may = ROLE_PERMISSIONS[role].get(model, frozenset())
        status = client.get(url(model, "change", own.pk)).status_code
        assert status == (200 if "view" in may else 403), model


def test_catalog_is_read_only_for_institution_admins_and_hidden_from_reviewers(world):
    admin = login_as("admin", world["a"]["institution"])
    model = Model.objects.first()
    assert admin.get(url(Model, "changelist")).status_code == 200
    assert admin.get(url(Provider, "changelist")).status_code == 200
    assert admin.get(url(ProviderModel, "changelist")).status_code == 200
    page = admin.get(url(Model, "change", model.pk))
    assert page.status_code == 200 and 'name="model_id"' not in page.content.decode()
    assert admin.post(url(Model, "change", model.pk), {"model_id": "x"}).status_code == 403
    assert admin.get(url(Model, "add")).status_code == 403
    assert admin.get(url(Connection, "changelist")).status_code == 403
    reviewer = get_user_model().objects.create_user("rev2", is_staff=True)
    AdminProfile.objects.create(
        user=reviewer, institution=world["a"]["institution"], role="reviewer"
    )
    client = Client()
    client.force_login(reviewer)
    assert client.get(url(Model, "changelist")).status_code == 403
    assert client.get(url(Connection, "changelist")).status_code == 403


def test_staff_without_a_role_sees_no_licensing_row(world):
    user = get_user_model().objects.create_user("plain", is_staff=True)
    client = Client()
    client.force_login(user)
    for model in SCOPED_MODELS:
        assert client.get(url(model, "changelist")).status_code == 403
    index = client.get("/admin/")
    assert index.status_code == 200 and "License" not in index.content.decode()


def test_foreign_key_choices_and_autocomplete_are_scoped(world):
    client = login_as("admin", world["a"]["institution"])
    own, other = world["a"]["license"], world["b"]["license"]
    # The add form accepts only its own licenses.
    data = form_data(client.get(url(ApiKey, "add")))
    data.update(license=str(other.pk), name="smuggled")
    response = client.post(url(ApiKey, "add"), data)
    assert response.status_code == 200
    assert "license" in response.context["adminform"].form.errors
    assert not ApiKey.objects.filter(name="smuggled").exists()
    # The autocomplete widget offers only its own rows.
    found = client.get(
        "/admin/autocomplete/",
        {"app_label": "licensing", "model_name": "apikey", "field_name": "license", "term": ""},
    ).json()
    assert [r["id"] for r in found["results"]] == [str(own.pk)]
    found = client.get(
        "/admin/autocomplete/",
        {"app_label": "licensing", "model_name": "license", "field_name": "institution"},
    ).json()
    assert [r["text"] for r in found["results"]] == ["Institution a"]
    found = client.get(
        "/admin/autocomplete/",
        {"app_label": "licensing", "model_name": "license", "field_name": "license_type"},
    ).json()
    names = {r["text"] for r in found["results"]}
    assert world["b"]["license_type"].name not in names


def test_a_license_on_another_institution_or_shared_type_cannot_be_made(world):
    client = login_as("admin", world["a"]["institution"])
    data = form_data(client.get(url(License, "add")))
    assert data["institution"] == str(world["a"]["institution"].pk)  # preset to its own
    data.update(
        name="new-one",
        institution=str(world["b"]["institution"].pk),
        license_type=str(world["a"]["license_type"].pk),
        budget_unit="micro_credits",
    )
    response = client.post(url(License, "add"), data)
    assert response.status_code == 200
    assert "institution" in response.context["adminform"].form.errors
    data["institution"] = str(world["a"]["institution"].pk)
    assert client.post(url(License, "add"), data).status_code == 302
    assert License.objects.get(name="new-one").institution == world["a"]["institution"]
    # License types: never shared (no institution) when made by an institution admin.
    data = form_data(client.get(url(LicenseType, "add")))
    data.update(name="no owner", institution="")
    response = client.post(url(LicenseType, "add"), data)
    assert response.status_code == 200
    assert not LicenseType.objects.filter(name="no owner").exists()


def test_filters_search_and_actions_are_scoped(world):
    client = login_as("admin", world["a"]["institution"])
    License.objects.create(
        name="license-a2",
        institution=world["a"]["institution"],
        license_type=world["a"]["license_type"],
    )
    listing = client.get(url(Transaction, "changelist"))
    offered = {str(lic) for lic in listing.context["cl"].review.form.fields["license"].queryset}
    assert offered == {"license-a", "license-a2"}
    offered = set()
    for spec in client.get(url(ApiKey, "changelist")).context["cl"].filter_specs:
        if isinstance(spec, admin.RelatedFieldListFilter):
            offered.update(str(label) for _, label in spec.lookup_choices)
    assert {"license-a", "license-a2"} <= offered and "license-b" not in offered
    assert client.get(url(ApiKey, "changelist"), {"q": "license-b"}).context["cl"].result_count == 0
    forced = client.get(url(Transaction, "changelist"), {"license": world["b"]["license"].pk})
    assert forced.status_code == 400 and forced.context["cl"].result_count == 0
    forced = client.get(
        url(Transaction, "changelist"), {"license__id__exact": world["b"]["license"].pk}
    )
    assert forced.status_code == 200 and forced.context["cl"].result_count == 0
    other_key = world["b"]["api_key"]
    client.post(
        url(ApiKey, "changelist"),
        {"action": "deactivate", "_selected_action": [str(other_key.pk)]},
    )
    other_key.refresh_from_db()
    assert other_key.active is True


def test_reviewer_reads_but_cannot_change_licenses(world):
    client = login_as("reviewer", world["a"]["institution"])
    lic = world["a"]["license"]
    page = client.get(url(License, "change", lic.pk))
    assert page.status_code == 200 and 'name="budget_limit"' not in page.content.decode()
    assert client.post(url(License, "change", lic.pk), {"budget_limit": "1"}).status_code == 403
    lic.refresh_from_db()
    assert lic.budget_limit == 1_000_000


def test_superuser_sees_both_institutions(world, admin_client):
    shown = admin_client.get(url(License, "changelist")).context["cl"].result_list
    assert {lic.name for lic in shown} == {"license-a", "license-b"}


def test_user_form_ties_a_user_to_an_institution(world, admin_client):
    data = form_data(admin_client.get("/admin/auth/user/add/"))
    data.update(
        username="teacher",
        password1="a-long-password-1",
        password2="a-long-password-1",
        usable_password="true",
    )
    response = admin_client.post("/admin/auth/user/add/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    user = get_user_model().objects.get(username="teacher")
    change = f"/admin/auth/user/{user.pk}/change/"
    data = form_data(admin_client.get(change))
    data.update(
        {
            "is_staff": "on",
            "gateway_profile-TOTAL_FORMS": "1",
            "gateway_profile-0-institution": str(world["a"]["institution"].pk),
            "gateway_profile-0-role": "reviewer",
        }
    )
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    profile = AdminProfile.objects.get(user=user)
    assert (profile.institution, profile.role) == (world["a"]["institution"], "reviewer")


def test_institution_admins_cannot_manage_users(world):
    client = login_as("admin", world["a"]["institution"])
    assert client.get("/admin/auth/user/").status_code == 403
    assert client.get(url(AdminProfile, "changelist")).status_code == 403


def test_usage_figures_and_holder_names_in_the_lists(world, admin_client):
    listing = admin_client.get(url(License, "changelist")).content.decode()
    # license-a: per user, monthly, limit 1,000,000, one wallet with 1,234 spent.
    # Money beside the credits, at the gateway's default rate (1,000,000 per USD).
    assert "0.0012 USD (1,234 micro-credits); 1 holders, highest 1,234" in listing
    assert "1.00 USD (998,766 micro-credits) (least-left holder)" in listing
    assert "1.00 USD (1,000,000 micro-credits) monthly per holder" in listing
    page = admin_client.get(url(License, "change", world["a"]["license"].pk)).content.decode()
    assert "monthly from" in page and "Usage in the current window" in page
    assert f"/admin/licensing/transaction/?license={world['a']['license'].pk}" in page
    wallets = admin_client.get(url(Wallet, "changelist")).content.decode()
    assert "user-a (https://idp-a.example)" in wallets
    keys = admin_client.get(url(ApiKey, "changelist"))
    assert "last used" in keys.content.decode().lower()

"""The policy form on the license type's page (licensing.console.policy_form), through the
Django test client: posts of the form save the exact document, rules the form does not know are
kept, JSON-only posts still work, hostile values are form errors (never a 500), the change is
audited, institution admins edit their own types and only see shared ones; and the form under a
`ceiling` (how a course will use it)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from catalog.selectors import policy_choices, service_providers
from licensing.console.policy_form import PolicyForm
from licensing.models import AuditEvent, LicenseType
from licensing.rules.policy import validate_policy_document

from ..access.test_scoping import login_as
from ..console.test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

P = "policyform-"
DOCUMENT = {
    "version": 1,
    "limits": {"holder": {"requests_per_minute": 20}},
    "services": {
        "chat_completions": {
            "params": {
                "user": {"patterns": ["s[0-9]+"]},
                "max_tokens": {"max": 4000, "min": 1},
                "tools": {"forbidden": True},
            }
        },
        "image_generation": {"providers": ["direct"]},
        "embeddings": None,
    },
}


@pytest.fixture
def found():
    from catalog.services import catalog_load_defaults

    catalog_load_defaults()  # the checklists' models and providers
    return make_licensing("pf")


@pytest.fixture
def license_type(found):
    return LicenseType.objects.create(
        institution=found["institution"], name="school", policy=DOCUMENT
    )


def _page(client, license_type):
    response = client.get(url(LicenseType, "change", license_type.pk))
    assert response.status_code == 200
    return response, form_data(response)


def _errors(response) -> str:
    form = response.context["adminform"].form
    return f"{form.errors!r} {form.policy_form.errors!r}"


def _ticked(data: dict, name: str) -> list[str]:
    value = data.get(P + name, [])
    return value if isinstance(value, list) else [value]


def test_the_page_shows_the_document_in_the_form(admin_client, license_type):
    response, data = _page(admin_client, license_type)
    page = response.content.decode()
    assert 'id="policy-form"' in page and "Policy as JSON" in page
    assert data[P + "chat_completions__enabled"] == "on"
    assert data[P + "embeddings__enabled"] == "on"
    assert P + "responses__enabled" not in data  # not in the document: unticked
    assert data[P + "chat_completions__max_tokens__max"] == "4000"
    assert _ticked(data, "image_generation__providers") == ["direct"]
    assert _ticked(data, "chat_completions__models") == []
    # The catalog's chat models are offered, the image models under image generation.
    choices = policy_choices()
    assert "gpt-4o-mini" in choices["chat_completions"]
    assert "gpt-4o-mini" not in choices["image_generation"]
    assert choices["image_generation"], choices
    assert f'value="{choices["image_generation"][0]}"' in page


def test_a_post_of_the_form_saves_the_exact_document_and_keeps_unknown_rules(
    admin_client, license_type
):
    _, data = _page(admin_client, license_type)
    data[P + "image_generation__enabled"] = ""  # unticked: the browser sends nothing
    del data[P + "image_generation__enabled"]
    data[P + "responses__enabled"] = "on"
    data[P + "responses__models"] = ["gpt-4.1"]
    data[P + "chat_completions__models"] = ["gpt-4o-mini", "gpt-4.1"]
    data[P + "chat_completions__providers"] = ["direct"]
    data[P + "chat_completions__max_tokens__max"] = "500"
    data[P + "chat_completions__temperature__min"] = "0"
    data[P + "chat_completions__temperature__max"] = "1.5"
    data[P + "confirm_split"] = "on"  # chat and responses differ, knowingly
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 302, _errors(response)
    license_type.refresh_from_db()
    assert license_type.policy == {
        "version": 1,
        "limits": {"holder": {"requests_per_minute": 20}},
        "services": {
            "chat_completions": {
                "params": {
                    "user": {"patterns": ["s[0-9]+"]},
                    "max_tokens": {"max": 500, "min": 1},
                    "tools": {"forbidden": True},
                    "model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                    "temperature": {"min": 0, "max": 1.5},
                },
                "providers": ["direct"],
            },
            "embeddings": None,
            "responses": {"params": {"model": {"allowed": ["gpt-4.1"]}}},
        },
    }
    validate_policy_document(license_type.policy)
    event = AuditEvent.objects.get(action="policy_changed")
    assert event.target == f"licensetype:{license_type.pk}"
    assert event.detail["after"]["policy"] == license_type.policy

    # Clearing the fields removes their rules again, and nothing else.
    _, data = _page(admin_client, license_type)
    data[P + "chat_completions__models"] = []
    data[P + "chat_completions__providers"] = []
    data[P + "chat_completions__max_tokens__max"] = ""
    data[P + "chat_completions__temperature__min"] = ""
    data[P + "chat_completions__temperature__max"] = ""
    data[P + "image_generation__enabled"] = "on"
    data[P + "image_generation__n__max"] = "2"
    data[P + "image_generation__size__allowed"] = ["1024x1024", "auto"]
    data[P + "confirm_split"] = "on"
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 302, _errors(response)
    license_type.refresh_from_db()
    assert license_type.policy["services"]["chat_completions"] == {
        "params": {
            "user": {"patterns": ["s[0-9]+"]},
            "max_tokens": {"min": 1},
            "tools": {"forbidden": True},
        }
    }
    assert license_type.policy["services"]["image_generation"] == {
        "params": {"n": {"max": 2}, "size": {"allowed": ["1024x1024", "auto"]}}
    }


def test_json_edits_and_form_edits_in_one_post_both_land(admin_client, license_type):
    _, data = _page(admin_client, license_type)
    document = json.loads(data["policy"])
    document["services"]["chat_completions"]["params"]["seed"] = {"fixed": 7}
    document["routing"] = {"connection_tags": ["eu"]}
    data["policy"] = json.dumps(document)
    data[P + "chat_completions__max_tokens__max"] = "100"
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 302, _errors(response)
    license_type.refresh_from_db()
    params = license_type.policy["services"]["chat_completions"]["params"]
    assert params["seed"] == {"fixed": 7} and params["max_tokens"] == {"max": 100, "min": 1}
    assert license_type.policy["routing"] == {"connection_tags": ["eu"]}


def test_a_json_only_post_saves_the_json_as_it_is(admin_client, license_type):
    """Scripts and older pages post the document without the form: no service is switched off."""
    _, data = _page(admin_client, license_type)
    data = {k: v for k, v in data.items() if not k.startswith(P)}
    document = {"version": 1, "services": {"embeddings": {}}}
    data["policy"] = json.dumps(document)
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 302
    license_type.refresh_from_db()
    assert license_type.policy == document


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("chat_completions__max_tokens__max", "12\x00", "whole number"),
        ("chat_completions__max_tokens__max", "1e400", "whole number"),
        ("chat_completions__max_tokens__max", str(2**64), "less than or equal to"),
        ("chat_completions__max_tokens__max", "-5", "greater than or equal to 0"),
        ("chat_completions__temperature__max", "1e400", "number"),
        ("chat_completions__temperature__max", "nan", "number"),
        ("chat_completions__temperature__max", "-0.1", "greater than or equal to 0"),
        ("chat_completions__temperature__min", "1.5", "The minimum is above the maximum"),
        ("chat_completions__models", ["gpt-4o-mini\x00"], "valid choice"),
        ("chat_completions__providers", ["nowhere"], "valid choice"),
        ("image_generation__n__max", "0", "greater than or equal to 1"),
        ("image_generation__size__allowed", ["99999x99999"], "valid choice"),
        ("web_search__num_results__max", "9" * 5000, "whole number"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "value",
)
def test_hostile_values_are_form_errors(admin_client, license_type, field, value, message):
    _, data = _page(admin_client, license_type)
    data[P + "chat_completions__temperature__max"] = "1"
    data[P + "web_search__enabled"] = "on"
    data[P + field] = value
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 200
    policy_form = response.context["adminform"].form.policy_form
    errors = " ".join(str(e) for e in policy_form.errors.get(field, []))
    assert message in errors, policy_form.errors
    assert "The policy form has errors" in response.content.decode()
    license_type.refresh_from_db()
    assert license_type.policy == DOCUMENT


def test_a_lone_surrogate_in_the_post_is_a_form_error(admin_client, license_type):
    from urllib.parse import urlencode

    _, data = _page(admin_client, license_type)
    body = urlencode(data, doseq=True) + "&policyform-chat_completions__models=%ED%A0%80"
    response = admin_client.post(
        url(LicenseType, "change", license_type.pk),
        body,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.policy_form.errors
    assert "valid choice" in str(errors["chat_completions__models"])
    license_type.refresh_from_db()
    assert license_type.policy == DOCUMENT


def test_institution_admins_edit_their_own_types_and_only_see_shared_ones(found, license_type):
    client = login_as("admin", found["institution"])
    _, data = _page(client, license_type)
    data[P + "chat_completions__max_tokens__max"] = "42"
    assert client.post(url(LicenseType, "change", license_type.pk), data).status_code == 302
    license_type.refresh_from_db()
    assert license_type.policy["services"]["chat_completions"]["params"]["max_tokens"]["max"] == 42

    shared = LicenseType.objects.create(institution=None, name="shared", policy=DOCUMENT)
    response = client.get(url(LicenseType, "change", shared.pk))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="policy-form"' in page
    assert 'name="policyform-chat_completions__max_tokens__max" value="4000"' in page
    tag = page.split('name="policyform-chat_completions__max_tokens__max"')[1].split(">")[0]
    assert "disabled" in tag
    data = form_data(response) | {P + "chat_completions__max_tokens__max": "1", "policy": "{}"}
    response = client.post(url(LicenseType, "change", shared.pk), data)
    assert response.status_code in (302, 403)
    shared.refresh_from_db()
    assert shared.policy == DOCUMENT

    other = make_licensing("other")
    theirs = LicenseType.objects.create(institution=other["institution"], name="x", policy={})
    assert client.get(url(LicenseType, "change", theirs.pk)).status_code == 404


CEILING = {
    "version": 1,
    "services": {
        "chat_completions": {
            "providers": ["direct"],
            "params": {
                "model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                "max_tokens": {"max": 4000},
            },
        },
        "embeddings": {},
    },
}


def _ceiling_form(data=None, document=None):
    return PolicyForm(
        data,
        document=document if document is not None else {"version": 1, "services": {}},
        ceiling=CEILING,
        models=policy_choices(),
        providers=service_providers(),
    )


def test_under_a_ceiling_only_what_it_allows_is_offered_and_its_values_are_shown(found):
    form = _ceiling_form()
    assert [s["service"] for s in form.sections] == ["chat_completions", "embeddings"]
    models = form.fields["chat_completions__models"]
    assert sorted(v for v, _ in models.choices) == ["gpt-4.1", "gpt-4o-mini"]
    assert [v for v, _ in form.fields["chat_completions__providers"].choices] == ["direct"]
    limit = form.fields["chat_completions__max_tokens__max"]
    assert limit.help_text.startswith("License type: 4000.") and limit.max_value == 4000

    data = {
        P + "shown": "1",
        P + "chat_completions__enabled": "on",
        P + "chat_completions__models": ["gpt-4o-mini"],
        P + "chat_completions__max_tokens__max": "1000",
    }
    form = _ceiling_form(data)
    assert form.is_valid(), form.errors
    overlay = form.apply(form.document)
    assert overlay == {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {"model": {"allowed": ["gpt-4o-mini"]}, "max_tokens": {"max": 1000}}
            }
        },
    }
    assert form.widenings(overlay) == []

    form = _ceiling_form(data | {P + "chat_completions__max_tokens__max": "8000"})
    assert not form.is_valid()
    assert "less than or equal to 4000" in str(form.errors["chat_completions__max_tokens__max"])
    # A widening written elsewhere (the JSON view) is refused with overlay_widenings' reasons.
    form = _ceiling_form(data)
    assert form.is_valid()
    wide = form.apply({"version": 1, "services": {"image_generation": {}}})
    assert form.widenings(wide) == ["services.image_generation: not enabled by the license type"]
    with pytest.raises(ValidationError) as refused:
        form.document_for({"version": 1, "services": {"image_generation": {}}})
    assert refused.value.messages == ["services.image_generation: not enabled by the license type"]
    assert form.document_for({"version": 1, "services": {}}) == overlay


def test_an_anonymous_or_forged_post_changes_nothing(license_type):
    response = Client().post(
        url(LicenseType, "change", license_type.pk), {P + "shown": "1", "policy": "{}"}
    )
    assert response.status_code == 302 and "/login/" in response["Location"]
    license_type.refresh_from_db()
    assert license_type.policy == DOCUMENT


def test_values_written_in_json_outside_the_forms_range_survive_a_save(admin_client, found):
    document = {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {"max_tokens": {"max": 2**60}, "temperature": {"max": 5}}
            },
            "responses": {"params": {"max_output_tokens": {"max": 10.5}}},
        },
    }
    license_type = LicenseType.objects.create(
        institution=found["institution"], name="odd", policy=document
    )
    _, data = _page(admin_client, license_type)
    data[P + "embeddings__enabled"] = "on"
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 302, _errors(response)
    license_type.refresh_from_db()
    assert license_type.policy == {
        **document,
        "services": {**document["services"], "embeddings": {}},
    }


@pytest.mark.both_databases  # each database refuses a NUL its own way
def test_nul_in_the_json_view_is_a_form_error_on_both_databases(admin_client, license_type):
    _, data = _page(admin_client, license_type)
    data["policy"] = json.dumps(
        {
            "version": 1,
            "services": {"chat_completions": {"params": {"user": {"excluded": ["\x00"]}}}},
        }
    )
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 200
    assert "NUL" in str(response.context["adminform"].form.errors["policy"])
    license_type.refresh_from_db()
    assert license_type.policy == DOCUMENT


@pytest.mark.parametrize("field", ["policy", "guardrails"])
def test_a_lone_surrogate_in_the_json_view_is_a_form_error_not_a_500(
    admin_client, license_type, field
):
    _, data = _page(admin_client, license_type)
    # json.dumps writes the lone surrogate as the escape "\ud800", as a browser or script would.
    data[field] = json.dumps(
        {
            "version": 1,
            "services": {"chat_completions": {"params": {"user": {"excluded": ["a\ud800"]}}}},
        }
        if field == "policy"
        else {"input": {"patterns": ["a\ud800"]}}
    )
    response = admin_client.post(url(LicenseType, "change", license_type.pk), data)
    assert response.status_code == 200
    assert "lone surrogate" in str(response.context["adminform"].form.errors[field])
    license_type.refresh_from_db()
    assert license_type.policy == DOCUMENT

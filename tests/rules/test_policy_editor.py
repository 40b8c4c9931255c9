"""Policy editing: rule names checked against the real request schemas, docs/policy.md linked
and served, and the license-type page's "try a request" panel."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from licensing.models import LicenseType
from licensing.rules.policy import PolicyDocumentError, validate_policy_document

from ..access.test_scoping import login_as
from ..console.test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

SCHOOL = {
    "version": 1,
    "services": {
        "chat_completions": {
            "providers": ["direct"],
            "params": {
                "model": {"allowed": ["gpt-4o-mini"]},
                "max_tokens": {"max": 1000},
                "temperature": {"min": 0, "max": 1},
                "tools": {"forbidden": True},
            },
        },
        "embeddings": {"params": {"dimensions": {"max": 512}}},
    },
}


@pytest.fixture
def license_type(db):
    found = make_licensing("a")
    return LicenseType.objects.create(
        institution=found["institution"], name="school", policy=SCHOOL
    )


@pytest.mark.parametrize(
    ("service", "name"),
    [
        ("chat_completions", "max_tokenz"),
        ("embeddings", "dimension"),
        ("responses", "max_tokens"),  # responses has max_output_tokens
        ("image_generation", "messages"),
    ],
)
def test_unknown_parameter_names_are_refused_with_the_known_list(service, name):
    document = {"version": 1, "services": {service: {"params": {name: {"max": 5}}}}}
    with pytest.raises(PolicyDocumentError) as caught:
        validate_policy_document(document)
    message = str(caught.value)
    assert f"unknown parameter(s) ['{name}']" in message
    assert "known parameters: [" in message


@pytest.mark.parametrize(
    ("service", "name"),
    [
        ("chat_completions", "max_tokens"),
        ("chat_completions", "max_completion_tokens"),
        ("chat_completions", "reasoning_effort"),
        ("chat_completions", "reasoning.effort"),
        ("responses", "reasoning_effort"),
        ("responses", "max_output_tokens"),
        ("responses", "include"),
        ("embeddings", "dimensions"),
        ("bedrock_embeddings", "inputText"),
        ("bedrock_embeddings", "texts"),
        ("gemini_embeddings", "output_dimensionality"),
        ("image_generation", "size"),
    ],
)
def test_real_parameter_names_are_accepted(service, name):
    validate_policy_document({"version": 1, "services": {service: {"params": {name: {"max": 5}}}}})


def test_the_admin_form_refuses_max_tokenz_and_links_the_docs(admin_client, license_type):
    change = url(LicenseType, "change", license_type.pk)
    page = admin_client.get(change)
    docs_url = "/admin/licensing/licensetype/policy-docs/"
    assert docs_url in page.content.decode()
    docs = admin_client.get(docs_url)
    assert docs.status_code == 200 and "max_tokens" in docs.content.decode()
    data = form_data(page)
    bad = json.loads(json.dumps(SCHOOL))
    bad["services"]["chat_completions"]["params"]["max_tokenz"] = {"max": 10}
    data["policy"] = json.dumps(bad)
    response = admin_client.post(change, data)
    assert response.status_code == 200
    errors = " ".join(response.context["adminform"].form.errors["policy"])
    assert "['max_tokenz']" in errors and "'max_completion_tokens'" in errors
    license_type.refresh_from_db()
    assert license_type.policy == SCHOOL


def _try(client, license_type, service, body):
    text = body if isinstance(body, str) else json.dumps(body)
    return client.post(url(LicenseType, "try", license_type.pk), {"service": service, "body": text})


def test_try_a_request_allowed_with_providers(admin_client, license_type):
    page = admin_client.get(url(LicenseType, "change", license_type.pk)).content.decode()
    assert 'id="try-request"' in page
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    answer = _try(admin_client, license_type, "chat_completions", body).json()
    assert answer["outcome"] == "allowed" and answer["providers"] == ["direct"]
    answer = _try(admin_client, license_type, "embeddings", {"model": "m", "input": "x"}).json()
    assert answer["outcome"] == "allowed"
    assert answer["providers_note"].startswith("every provider")


@pytest.mark.parametrize(
    ("service", "body", "message", "param", "rule"),
    [
        (
            "chat_completions",
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            "'model' must be one of: [gpt-4o-mini]",
            "model",
            'services.chat_completions.params.model: {"allowed": ["gpt-4o-mini"]}',
        ),
        (
            "chat_completions",
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 5000,
            },
            "'max_completion_tokens' must be <= 1000",
            "max_completion_tokens",
            'services.chat_completions.params.max_tokens: {"max": 1000}',
        ),
        (
            "responses",
            {"model": "gpt-4o-mini", "input": "hi"},
            "service 'responses' is not enabled for this license",
            None,
            "services: 'responses' is not listed",
        ),
    ],
)
def test_try_a_request_denied_shows_the_exact_403_and_the_rule(
    admin_client, license_type, service, body, message, param, rule
):
    answer = _try(admin_client, license_type, service, body).json()
    assert answer["outcome"] == "denied" and answer["status"] == 403
    assert answer["body"] == {
        "error": {"message": message, "code": "policy_denied", "param": param}
    }
    assert answer["rule"] == rule


def test_try_a_request_invalid_body_is_the_api_422(admin_client, license_type):
    answer = _try(
        admin_client, license_type, "embeddings", {"model": "m", "input": "x", "dimensions": "5"}
    ).json()
    assert answer["outcome"] == "invalid" and answer["status"] == 422
    assert answer["body"]["detail"][0]["loc"] == ["body", "dimensions"]
    assert answer["body"]["error"] == {  # the API's 422 body, `error` included
        "message": "dimensions: Input should be a valid integer",
        "type": "invalid_request_error",
        "param": "dimensions",
        "code": "int_type",
    }
    answer = _try(admin_client, license_type, "embeddings", "{not json").json()
    assert answer["outcome"] == "invalid"
    bad_service = _try(admin_client, license_type, "teleport", {})
    assert bad_service.status_code == 400


def test_try_panel_is_scoped(license_type):
    other = make_licensing("b")
    client: Client = login_as("admin", other["institution"])
    response = _try(client, license_type, "embeddings", {"model": "m", "input": "x"})
    assert response.status_code == 404
    assert Client().post(url(LicenseType, "try", license_type.pk)).status_code == 302  # login


def test_the_examples_in_docs_policy_md_are_valid():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    blocks = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"version": 1' in b]
    documents = [json.loads(b) for b in blocks if "<" not in b]
    # Three examples, the `models` one, the fair-use one and the residency one.
    assert len(documents) == 6
    for document in documents:
        validate_policy_document(document)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"model": "m", "input": NaN}', "json_invalid"),
        ("", "missing"),
        (
            '{"model": "m", "input": 1e400}',
            "json_invalid",
        ),  # as the API: 1e400 is not a finite number
        ("[1, 2]", "model_type"),
        ('{"model": "m", "input": "x", "dimensions": "5"}', "int_type"),
    ],
)
def test_try_a_request_hostile_bodies_are_clear_json(admin_client, license_type, text, kind):
    response = _try(admin_client, license_type, "embeddings", text)
    assert response.status_code == 200
    answer = json.loads(response.content, parse_constant=pytest.fail)  # no NaN/Infinity
    assert answer["outcome"] == "invalid" and answer["status"] == 422
    assert answer["body"]["detail"][0]["type"] == kind
    assert answer["body"]["error"]["code"] == kind

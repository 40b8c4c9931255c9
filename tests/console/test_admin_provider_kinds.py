"""The admin and issue 34's kinds: a superuser adds a provider of a new kind and a chat model
with prices (its row refused active without a price), and the connection form's kind options
(Azure's api version and deployment map, an OpenAI-compatible server's Responses API and stream
usage) are saved to Connection.options, checked, and refused on a kind that has none."""

from __future__ import annotations

import pytest

from catalog.models import Connection, Model, Provider
from catalog.services import catalog_load_defaults

from .test_admin import form_data, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def loaded(db):
    catalog_load_defaults()


def test_superuser_adds_a_provider_of_a_new_kind(admin_client, loaded):
    add = url(Provider, "add")
    data = form_data(admin_client.get(add))
    data.update(slug="campus", kind="openai_compatible", description="Our vLLM")
    response = admin_client.post(add, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Provider.objects.get(slug="campus").kind == "openai_compatible"


def _model_form(admin_client, cost: str, active: str) -> dict:
    data = form_data(admin_client.get(url(Model, "add")))
    data.update(
        {
            "model_id": "llama-campus",
            "owned_by": str(Provider.objects.get(slug="mistral").pk),
            "supported_features": '["chat_completions", "responses"]',
            "input_modality": '{"text": true, "image": false}',
            "output_modality": '{"text": true, "image": false}',
            "cost": cost,
            "options": "{}",
            "provider_rows-TOTAL_FORMS": "1",
            "provider_rows-0-provider": str(Provider.objects.get(slug="mistral").pk),
            "provider_rows-0-upstream_model_id": "llama3.1:8b",
            "provider_rows-0-priority": "100",
        }
    )
    if active:
        data["provider_rows-0-active"] = "on"
    else:
        data.pop("provider_rows-0-active", None)
    return data


def test_superuser_adds_a_chat_model_with_prices(admin_client, loaded):
    priced = '{"type": "per_token", "prompt": 0.2, "completion": 0.6}'
    response = admin_client.post(url(Model, "add"), _model_form(admin_client, priced, "on"))
    assert response.status_code == 302, response.context["errors"]
    model = Model.objects.get(model_id="llama-campus")
    assert model.cost["completion"] == 0.6
    row = model.provider_rows.get()
    assert (row.provider.slug, row.upstream_model_id) == ("mistral", "llama3.1:8b")
    assert row.active


def test_a_model_without_a_price_is_not_served(admin_client, loaded):
    response = admin_client.post(url(Model, "add"), _model_form(admin_client, "{}", "on"))
    assert response.status_code == 200
    assert "A model without a price cannot be served" in response.content.decode()
    assert not Model.objects.filter(model_id="llama-campus").exists()
    response = admin_client.post(url(Model, "add"), _model_form(admin_client, "{}", ""))
    assert response.status_code == 302  # listed, inactive


def _connection_form(admin_client, provider: str, **fields) -> dict:
    data = form_data(admin_client.get(url(Connection, "add")))
    data.update(provider=str(Provider.objects.get(slug=provider).pk), name="default", weight="1")
    data.update(fields)
    return data


def test_azure_connection_options(admin_client, loaded):
    data = _connection_form(
        admin_client,
        "azure",
        base_url="https://school.openai.azure.com/openai",
        api_key="azure-key",
        api_version="2025-04-01-preview",
        deployments="gpt-4o-mini = mini-eu\n\ngpt-4.1=big\n",
        tags="eu",
    )
    response = admin_client.post(url(Connection, "add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    connection = Connection.objects.get(provider__slug="azure")
    assert connection.base_url == "https://school.openai.azure.com"
    assert connection.options == {
        "api_version": "2025-04-01-preview",
        "deployments": {"gpt-4o-mini": "mini-eu", "gpt-4.1": "big"},
    }
    change = url(Connection, "change", connection.pk)
    shown = form_data(admin_client.get(change))
    assert shown["api_version"] == "2025-04-01-preview"
    assert shown["deployments"] == "gpt-4.1=big\ngpt-4o-mini=mini-eu"  # by model id
    shown.update(api_version="", deployments="")  # back to the v1 path
    assert admin_client.post(change, shown).status_code == 302
    connection.refresh_from_db()
    assert connection.options == {} and connection.has_credentials


@pytest.mark.parametrize(
    ("provider", "fields", "field", "message"),
    [
        ("azure", {"api_version": "latest!"}, "api_version", "must be an Azure API version"),
        ("azure", {"deployments": "gpt-4o-mini"}, "deployments", "One MODEL=DEPLOYMENT per line"),
        ("azure", {"deployments": "m=bad name"}, "deployments", "must be 1-64 letters"),
        ("azure", {"responses_api": "native"}, "responses_api", "Only for a openai_compatible"),
        ("direct", {"api_version": "2024-10-21"}, "api_version", "Only for a azure_openai"),
    ],
)
def test_connection_options_refused(admin_client, loaded, provider, fields, field, message):
    data = _connection_form(
        admin_client, provider, base_url="https://x.example", api_key="k", **fields
    )
    response = admin_client.post(url(Connection, "add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors[field]), errors
    assert not Connection.objects.filter(base_url="https://x.example").exists()


def test_compatible_connection_without_a_key(admin_client, loaded):
    data = _connection_form(
        admin_client,
        "mistral",
        base_url="https://api.mistral.ai/v1",
        responses_api="native",
        stream_usage="always",
    )
    response = admin_client.post(url(Connection, "add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    connection = Connection.objects.get(provider__slug="mistral")
    assert connection.options == {"responses_api": "native", "stream_usage": "always"}
    assert connection.has_credentials  # the key is optional for the kind

"""Model -> provider row (catalog.routing.select_route) on a catalog built here, without a
database or a server: the owner first, then priority; inactive rows; pins to a provider and to
a connection; the policy's providers; models the catalog does not know; the spec's 400s.

How routing and the connection row agree on credentials is tests/providers/test_registry.py;
the same choices end to end (headers, the ledger's provider) are in tests/api/."""

from __future__ import annotations

import pytest

from catalog.routing import (
    Catalog,
    ConnectionInfo,
    ConnectionMisconfigured,
    ModelEntry,
    ProviderInfo,
    ProviderPin,
    ProviderRow,
    select_route,
)
from core.errors import BadRequest, ServiceUnavailable


def conn(name="default", key="k", **fields) -> ConnectionInfo:
    values = {
        "base_url": f"http://{name}.test",
        "region": "",
        "aws_access_key_id": "",
        "aws_secret_access_key": "",
        "timeout": None,
        "updated_at": 0.0,
    } | fields
    return ConnectionInfo(name=name, api_key=key, **values)


def provider(slug, kind="openai", *connections: ConnectionInfo) -> ProviderInfo:
    found = connections or (conn(),)
    return ProviderInfo(slug=slug, kind=kind, connections={c.name: c for c in found})


def model(model_id, owner, *rows: ProviderRow, image=False) -> ModelEntry:
    return ModelEntry(
        model_id=model_id,
        owned_by=owner,
        supported_features=(),
        input_modality={"text": True},
        output_modality={"image": True} if image else {"text": True},
        cost={},
        options={},
        listed=True,
        rows=rows,
    )


def row(slug, upstream, active=True, priority=0) -> ProviderRow:
    return ProviderRow(provider=slug, upstream_model_id=upstream, active=active, priority=priority)


CATALOG = Catalog(
    providers={
        "direct": provider(
            "direct", "openai", conn(), conn("eu", key="k-eu"), conn("nokey", key="")
        ),
        "aggregator": provider("aggregator", "openrouter"),
        "second": provider("second", "openai"),
        "cloud": provider(
            "cloud", "bedrock", conn(aws_access_key_id="A", aws_secret_access_key="s")
        ),
        "websearch": provider("websearch", "websearch"),
    },
    models={
        # Owned by direct, also served by the aggregator (cheaper by priority) and second.
        "gpt-4o-mini": model(
            "gpt-4o-mini",
            "direct",
            row("aggregator", "openai/gpt-4o-mini", priority=0),
            row("second", "gpt-4o-mini-2", priority=1),
            row("direct", "gpt-4o-mini", priority=5),
        ),
        # Owned by a provider with no row for it: priority decides.
        "llama": model(
            "llama",
            "meta",
            row("second", "llama-b", priority=2),
            row("aggregator", "meta/llama", priority=1),
        ),
        "retired": model("retired", "direct", row("direct", "retired", active=False)),
        "gpt-image-1": model("gpt-image-1", "direct", row("direct", "gpt-image-1"), image=True),
    },
)


def choose(model_id, endpoint="chat_completions", pin=None, allowed=None, **kwargs):
    return select_route(
        CATALOG, endpoint=endpoint, model=model_id, pin=pin, allowed=allowed, **kwargs
    )


def test_the_owner_first_then_priority():
    route = choose("gpt-4o-mini")
    assert (route.provider.slug, route.upstream_model, route.connection.name) == (
        "direct",
        "gpt-4o-mini",
        "default",
    )
    assert route.model is CATALOG.models["gpt-4o-mini"]
    assert (choose("llama").provider.slug, choose("llama").upstream_model) == (
        "aggregator",
        "meta/llama",
    )


def test_the_policys_providers_narrow_the_rows():
    route = choose("gpt-4o-mini", allowed=frozenset({"aggregator", "second"}))
    assert (route.provider.slug, route.upstream_model) == ("aggregator", "openai/gpt-4o-mini")
    with pytest.raises(BadRequest) as refused:
        choose("gpt-4o-mini", allowed=frozenset({"cloud"}))
    assert refused.value.message == "No provider available for endpoint 'chat_completions'"


def test_a_pin_chooses_the_provider_and_its_connection():
    route = choose("gpt-4o-mini", pin=ProviderPin("second", None))
    assert (route.provider.slug, route.upstream_model) == ("second", "gpt-4o-mini-2")
    route = choose("gpt-4o-mini", pin=ProviderPin("direct", "eu"))
    assert (route.connection.name, route.connection.api_key) == ("eu", "k-eu")


@pytest.mark.parametrize(
    "pin",
    [
        ProviderPin("cloud", None),  # does not serve the endpoint
        ProviderPin("nowhere", None),
        ProviderPin("direct", "mars"),  # no such connection
    ],
)
def test_a_pin_that_cannot_serve_is_the_pinned_400(pin):
    with pytest.raises(BadRequest) as refused:
        choose("gpt-4o-mini", pin=pin)
    assert refused.value.message == (
        "No provider available for endpoint 'chat_completions' under the current pins"
    )


def test_a_pin_without_a_row_for_the_model():
    with pytest.raises(BadRequest) as refused:
        choose("llama", pin=ProviderPin("direct", None))
    assert "under the current pins" in refused.value.message


def test_only_inactive_rows():
    with pytest.raises(BadRequest) as refused:
        choose("retired")
    assert refused.value.message == "No active provider for model 'retired'"


def test_an_unknown_model_goes_to_the_endpoints_default_provider_unchanged():
    route = choose("gpt-5-preview")
    assert (route.provider.slug, route.upstream_model, route.model) == (
        "direct",
        "gpt-5-preview",
        None,
    )
    # The default not allowed: the first allowed provider by name.
    route = choose("gpt-5-preview", allowed=frozenset({"second", "aggregator"}))
    assert route.provider.slug == "aggregator"
    assert choose("x", endpoint="web_search").provider.slug == "websearch"


def test_output_modality():
    assert (
        choose("gpt-image-1", endpoint="image_generation", output_modality="image").provider.slug
        == "direct"
    )
    with pytest.raises(BadRequest) as refused:
        choose("gpt-4o-mini", endpoint="image_generation", output_modality="image")
    assert refused.value.message == (
        "No available provider for model 'gpt-4o-mini' supports image output"
    )


def test_no_provider_serves_the_endpoint():
    with pytest.raises(BadRequest) as refused:
        choose("gpt-4o-mini", endpoint="bedrock_embeddings", allowed=frozenset({"direct"}))
    assert refused.value.message == "No provider available for endpoint 'bedrock_embeddings'"


def test_a_connection_without_its_credential_is_misconfigured():
    with pytest.raises(ConnectionMisconfigured) as refused:
        choose("gpt-4o-mini", pin=ProviderPin("direct", "nokey"))
    assert refused.value.message == (
        "Connection 'nokey' is misconfigured: missing 'api_key' credential"
    )
    assert (refused.value.provider, refused.value.model) == ("direct", "gpt-4o-mini")


def test_a_connection_the_gateway_cannot_decrypt_is_503():
    broken = Catalog(
        providers={"direct": provider("direct", "openai", conn(undecryptable=True))},
        models={},
    )
    with pytest.raises(ServiceUnavailable):
        select_route(broken, endpoint="embeddings", model="m", pin=None, allowed=None)

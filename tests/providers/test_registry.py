"""catalog.registry: one declaration per provider kind and per service, and the one
credentials test that routing and the connection row (admin, `configure_connection`) share."""

from __future__ import annotations

import pytest

from catalog.models import Connection, Provider
from catalog.registry import (
    KIND_CHOICES,
    POLICY_SERVICES,
    PROVIDER_KINDS,
    SERVICES,
    Credentials,
    credentials_present,
)
from catalog.routing import (
    BUILTIN_CONNECTION,
    Catalog,
    ConnectionInfo,
    ConnectionMisconfigured,
    ProviderInfo,
    select_route,
)


def _info(**credentials) -> ConnectionInfo:
    values = {"api_key": "", "aws_access_key_id": "", "aws_secret_access_key": ""} | credentials
    return ConnectionInfo(
        name="default",
        base_url="http://127.0.0.1:9",
        region="",
        timeout=None,
        updated_at=0.0,
        **values,
    )


# The cases where the connection row's old test (any key or key pair) and the routing's
# (by kind) disagreed: a key pair on an API-key kind, an API key on an IAM kind, no key on a
# key-optional or built-in kind.
DISAGREED = [
    ("openai", {"aws_access_key_id": "AKIA", "aws_secret_access_key": "s"}, False),
    ("bedrock", {"api_key": "a-key"}, False),
    ("academic", {}, True),
    ("fetch", {}, True),
]
AGREED = [
    ("openai", {"api_key": "k"}, True),
    ("openai", {}, False),
    ("bedrock", {"aws_access_key_id": "AKIA", "aws_secret_access_key": "s"}, True),
    ("bedrock", {"aws_access_key_id": "AKIA"}, False),
    ("websearch", {}, False),
]


def _route(kind: str, connection: ConnectionInfo):
    endpoint = sorted(PROVIDER_KINDS[kind].endpoints)[0]
    provider = ProviderInfo(slug="p", kind=kind, connections={"default": connection})
    catalog = Catalog(providers={"p": provider}, models={})
    return select_route(catalog, endpoint=endpoint, model="m", pin=None, allowed=None)


@pytest.mark.parametrize("kind,credentials,expected", DISAGREED + AGREED)
def test_routing_and_the_connection_row_give_one_answer(db, kind, credentials, expected):
    provider = Provider.objects.create(slug="p", kind=kind)
    row = Connection(provider=provider, base_url="http://127.0.0.1:9", **credentials)
    assert row.has_credentials is expected
    if expected:
        assert _route(kind, _info(**credentials)).provider.slug == "p"
    else:
        with pytest.raises(ConnectionMisconfigured) as refused:
            _route(kind, _info(**credentials))
        assert refused.value.missing == (
            "IAM credentials" if kind == "bedrock" else "'api_key' credential"
        )


def test_a_builtin_kind_needs_no_connection_row():
    provider = ProviderInfo(slug="fetch", kind="fetch", connections={})
    route = select_route(
        Catalog(providers={"fetch": provider}, models={}),
        endpoint="web_fetch",
        model="web-fetch",
        pin=None,
        allowed=None,
    )
    assert route.connection is BUILTIN_CONNECTION


def test_an_undeclared_kind_serves_nothing_and_needs_a_key():
    assert not ProviderInfo(slug="x", kind="unknown", connections={}).serves("chat_completions")
    assert not credentials_present(
        "unknown", api_key="", aws_access_key_id="", aws_secret_access_key=""
    )


def test_provider_kind_choices_are_the_declared_kinds():
    assert Provider._meta.get_field("kind").choices == KIND_CHOICES
    assert [kind for kind, _ in KIND_CHOICES] == [
        "openai",
        "openrouter",
        "bedrock",
        "gemini",
        "websearch",
        "academic",
        "fetch",
        "azure_openai",
        "anthropic",
        "openai_compatible",
    ]
    assert {k.credentials for k in PROVIDER_KINDS.values()} == set(Credentials)


def test_every_declared_adapter_resolves_to_its_kind():
    from inference.providers import adapter_class
    from inference.providers.base import Transport

    for kind in PROVIDER_KINDS:
        cls = adapter_class(kind)
        assert issubclass(cls, Transport) and cls.kind == kind


def test_every_endpoint_a_kind_serves_is_a_declared_service():
    endpoints = {s.endpoint for s in SERVICES}
    for spec in PROVIDER_KINDS.values():
        assert spec.endpoints <= endpoints, spec.kind
    for service in SERVICES:
        assert any(service.endpoint in k.endpoints for k in PROVIDER_KINDS.values())


def test_every_declared_operation_resolves_to_its_service():
    from inference.endpoints import operation_class, service_routers
    from inference.pipeline import Operation

    for service in SERVICES:
        cls = operation_class(service)
        assert issubclass(cls, Operation)
        assert (cls.endpoint, cls.service) == (service.endpoint, service.service)
        assert cls.output_modality == service.output_modality
    assert len(service_routers()) == 7  # search and fetch share one module


def test_the_public_names_are_those_of_the_spec_and_the_policy_documents():
    """The internal endpoint names (the spec's 400 messages), the policy/ledger service names
    and the one place they differ: endpoint `web_fetch`, service `fetch`."""
    from licensing.rules.policy import SERVICES as policy_services

    assert [s.endpoint for s in SERVICES] == [
        "chat_completions",
        "responses",
        "embeddings",
        "gemini_embeddings",
        "bedrock_embeddings",
        "image_generation",
        "web_search",
        "web_fetch",
    ]
    assert (
        policy_services
        == POLICY_SERVICES
        == (
            "chat_completions",
            "responses",
            "embeddings",
            "gemini_embeddings",
            "bedrock_embeddings",
            "image_generation",
            "web_search",
            "fetch",
        )
    )
    assert [s.endpoint for s in SERVICES if s.service != s.endpoint] == ["web_fetch"]


def test_the_tables_read_from_the_registries_are_the_former_ones():
    from catalog.routing import DEFAULT_PROVIDER
    from inference.model_access import FEATURE_SERVICES
    from inference.policy_params import service_bodies
    from inference.schemas.search import FetchRequest
    from inference.tracing import OPERATIONS, PROVIDER_NAMES

    assert DEFAULT_PROVIDER == {
        "chat_completions": "direct",
        "responses": "direct",
        "embeddings": "direct",
        "image_generation": "direct",
        "bedrock_embeddings": "cloud",
        "gemini_embeddings": "multimodal",
        "web_search": "websearch",
        "web_fetch": "fetch",
    }
    assert OPERATIONS == {
        "chat_completions": "chat",
        "responses": "chat",
        "embeddings": "embeddings",
        "bedrock_embeddings": "embeddings",
        "gemini_embeddings": "embeddings",
        "image_generation": "generate_content",
        "web_search": "execute_tool",
        "fetch": "execute_tool",
    }
    assert PROVIDER_NAMES == {
        "openai": "openai",
        "openrouter": "openrouter",
        "bedrock": "aws.bedrock",
        "gemini": "gcp.gemini",
        "websearch": "brave_search",
        "academic": "openalex",
        "fetch": "inference_gateway",
        "azure_openai": "azure.ai.openai",
        "anthropic": "anthropic",
        "openai_compatible": "openai_compatible",
    }
    assert {feature: set(services) for feature, services in FEATURE_SERVICES.items()} == {
        "chat_completions": {("chat_completions", "chat_completions", None)},
        "responses": {("responses", "responses", None)},
        "embeddings": {
            ("embeddings", "embeddings", None),
            ("bedrock_embeddings", "bedrock_embeddings", None),
            ("gemini_embeddings", "gemini_embeddings", None),
        },
        "image_generation": {("image_generation", "image_generation", "image")},
        "web_search": {("web_search", "web_search", None)},
        "web_fetch": {("fetch", "web_fetch", None)},
    }
    bodies = service_bodies()
    assert list(bodies) == list(POLICY_SERVICES) and bodies["fetch"] is FetchRequest

"""Fixtures of the `azure_openai` and `openai_compatible` kinds: their fakes (session-scoped)
and catalogs with `azure` and an OpenAI-compatible provider connected to them."""

from __future__ import annotations

import pytest

AZURE_KEY = "azure-upstream-test-key"
HELLO = [{"role": "user", "content": "hello big world"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
AZURE_API_VERSION = "2025-04-01-preview"  # chat, embeddings and Responses


@pytest.fixture(scope="session")
def azure_fake():
    from fake_upstreams import serve
    from fake_upstreams.azure import AzureOpenAIFake

    with serve(AzureOpenAIFake(api_key=AZURE_KEY)) as fake:
        yield fake


@pytest.fixture(scope="session")
def compatible_fake():
    from fake_upstreams import serve
    from fake_upstreams.compatible import OpenAICompatibleFake

    with serve(OpenAICompatibleFake()) as fake:
        yield fake


@pytest.fixture
def azure_upstream(azure_fake):
    azure_fake.reset()
    return azure_fake


@pytest.fixture
def compatible_upstream(compatible_fake):
    compatible_fake.reset()
    return compatible_fake


@pytest.fixture
def azure_catalog(catalog, azure_upstream):
    """`catalog`, plus `azure` connected to its fake on the classic paths (an api version) and
    its default rows switched on (as `configure_connection azure ... --enable-models` does)."""
    from catalog.services import connection_configure_enabling
    from core.localcache import clear_all

    connection_configure_enabling(
        provider_slug="azure",
        base_url=azure_upstream.origin,
        api_key=AZURE_KEY,
        options={"api_version": AZURE_API_VERSION},
    )
    clear_all()
    return {**catalog, "azure": azure_upstream}


@pytest.fixture
def campus_catalog(catalog, compatible_upstream, settings):
    """`catalog`, plus a provider `campus` (openai_compatible) connected without a key to the
    vLLM-style fake, reachable by sync_models through the outbound guard (loopback and the
    fake's port allowed, as an operator allows a campus network)."""
    from catalog.services import connection_configure, provider_add
    from core.localcache import clear_all

    port = int(compatible_upstream.origin.rsplit(":", 1)[-1])
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
    }
    provider_add(slug="campus", kind="openai_compatible", description="Our GPU server")
    connection_configure(provider_slug="campus", base_url=compatible_upstream.base_url)
    clear_all()
    return {**catalog, "campus": compatible_upstream}

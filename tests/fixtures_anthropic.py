"""Fixtures of the `anthropic` provider kind: its fake (session-scoped) and the default catalog
with `anthropic` connected to it and its Claude rows enabled."""

from __future__ import annotations

import pytest

ANTHROPIC_KEY = "sk-ant-upstream-test"
CLAUDE_MODELS = ("claude-opus-4-5", "claude-haiku-4-5")


@pytest.fixture(scope="session")
def anthropic_upstream():
    from fake_upstreams import AnthropicFake, serve

    with serve(AnthropicFake(api_key=ANTHROPIC_KEY)) as fake:
        yield fake


@pytest.fixture
def claude_catalog(catalog, anthropic_upstream):
    """`catalog`, plus `anthropic` connected to its fake and the Claude models' `anthropic` rows
    active (their `cloud` rows stay as the default catalog has them: inactive)."""
    from catalog.models import ProviderModel
    from catalog.services import connection_configure
    from core.localcache import clear_all

    anthropic_upstream.reset()
    connection_configure(
        provider_slug="anthropic", base_url=anthropic_upstream.base_url, api_key=ANTHROPIC_KEY
    )
    for row in ProviderModel.objects.filter(
        model__model_id__in=CLAUDE_MODELS, provider__slug="anthropic"
    ):
        row.active = True
        row.save()
    clear_all()
    return {**catalog, "anthropic": anthropic_upstream}

"""Fixtures of the Bedrock chat tests: `cloud` connected to the Bedrock fake (session-scoped,
`bedrock_upstream` in tests/conftest.py) with its chat rows enabled, and a Claude model on
`cloud` of the tests' own (the default catalog's Claude rows belong to ANTHROPIC_MODELS)."""

from __future__ import annotations

import pytest

from tests.conftest import connect_cloud

BEDROCK_CLAUDE = "test-claude-on-cloud"
BEDROCK_CLAUDE_UPSTREAM = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
# Claude Sonnet 4.5's list prices (USD per 1M tokens == micro-credits per token).
BEDROCK_CLAUDE_COST = {
    "type": "per_token",
    "prompt": 3.0,
    "completion": 15.0,
    "cached_prompt": 0.30,
    "cache_write_prompt": 3.75,
}


@pytest.fixture
def bedrock_chat(catalog, bedrock_upstream):
    """`catalog`, plus `cloud` on the Bedrock fake with its chat rows and BEDROCK_CLAUDE active."""
    from catalog.defaults import BEDROCK_CHAT_MODELS
    from catalog.models import Model, Provider, ProviderModel
    from core.localcache import clear_all

    bedrock_upstream.reset()
    connect_cloud(bedrock_upstream)
    cloud = Provider.objects.get(slug="cloud")
    claude = Model.objects.create(
        model_id=BEDROCK_CLAUDE,
        owned_by=cloud,
        supported_features=["chat_completions", "responses", "reasoning"],
        input_modality={"text": True, "image": True, "audio": False, "video": False, "file": True},
        output_modality={"text": True, "image": False},
        cost=BEDROCK_CLAUDE_COST,
        options={"reasoning_efforts": ["none", "low", "medium", "high"]},
    )
    ProviderModel.objects.create(
        model=claude, provider=cloud, upstream_model_id=BEDROCK_CLAUDE_UPSTREAM
    )
    ids = [spec["model_id"] for spec in BEDROCK_CHAT_MODELS]
    ProviderModel.objects.filter(model__model_id__in=ids, provider=cloud).update(active=True)
    clear_all()
    yield {**catalog, "cloud": bedrock_upstream}
    bedrock_upstream.reset()

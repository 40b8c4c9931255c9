"""`/v1/responses` through chat completions (providers/bridge.py) on a provider of kind
`openai_compatible` connected to the OpenAI fake: its chat endpoint answers text, tool calls,
JSON documents and reasoning usage, and the bridge makes the Responses answers of them."""

from __future__ import annotations

import pytest

BRIDGE_PROVIDER = "campus"
BRIDGE_MODEL = "campus-llm"  # served as gpt-4o-mini
BRIDGE_REASONER = "campus-reasoner"  # served as o4-mini, with reasoning efforts
# Micro-credits per token (USD per 1M tokens).
BRIDGE_COST = {"type": "per_token", "prompt": 0.5, "completion": 1.5, "cached_prompt": 0.25}


@pytest.fixture
def bridged(catalog):
    """`catalog`, plus the `campus` provider (openai_compatible) on the OpenAI fake with
    `campus-llm` and `campus-reasoner`, owned by it (no header needed). Returns the fake."""
    from catalog.models import Model, Provider, ProviderModel
    from catalog.services import connection_configure
    from core.localcache import clear_all
    from tests.conftest import UPSTREAM_KEY

    fake = catalog["direct"]
    provider = Provider.objects.create(
        slug=BRIDGE_PROVIDER, kind="openai_compatible", description="A campus server"
    )
    connection_configure(
        provider_slug=BRIDGE_PROVIDER, base_url=fake.base_url, api_key=UPSTREAM_KEY
    )
    for model_id, upstream, efforts in (
        (BRIDGE_MODEL, "gpt-4o-mini", []),
        (BRIDGE_REASONER, "o4-mini", ["low", "medium", "high"]),
    ):
        model = Model.objects.create(
            model_id=model_id,
            owned_by=provider,
            supported_features=["chat_completions", "responses"]
            + (["reasoning"] if efforts else []),
            input_modality={"text": True, "image": True},
            output_modality={"text": True},
            cost=BRIDGE_COST,
            options={"reasoning_efforts": efforts},
        )
        ProviderModel.objects.create(model=model, provider=provider, upstream_model_id=upstream)
    clear_all()
    return fake

"""Fixtures of Gemini chat (`multimodal`): the default catalog with its Gemini chat rows active,
the `multimodal` connection on the session's Gemini fake, and a Gemini 3 model for thought
signatures (the default catalog ships Gemini 2.5 only)."""

from __future__ import annotations

import pytest

from tests.conftest import UPSTREAM_KEY

GEMINI_3 = "gemini-3-pro-preview"
# A function tool in the contract's (chat) format.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
def gemini_chat(catalog, gemini_upstream):
    """The Gemini fake, reset, serving `multimodal`'s chat models (and `direct`/`aggregator` as
    `catalog` has them)."""
    from catalog.models import Model, Provider, ProviderModel
    from catalog.services import connection_configure
    from core.localcache import clear_all

    gemini_upstream.reset()
    connection_configure(
        provider_slug="multimodal", base_url=gemini_upstream.base_url, api_key=UPSTREAM_KEY
    )
    ProviderModel.objects.filter(model__model_id__in=["gemini-2.5-flash", "gemini-2.5-pro"]).update(
        active=True
    )
    multimodal = Provider.objects.get(slug="multimodal")
    model = Model.objects.create(
        model_id=GEMINI_3,
        owned_by=multimodal,
        supported_features=["chat_completions", "responses", "reasoning"],
        input_modality={"text": True, "image": True},
        output_modality={"text": True},
        cost={"type": "per_token", "prompt": 2.0, "completion": 12.0, "cached_prompt": 0.2},
        options={"reasoning_efforts": ["low", "high"]},
    )
    ProviderModel.objects.create(model=model, provider=multimodal, upstream_model_id=GEMINI_3)
    clear_all()
    return gemini_upstream

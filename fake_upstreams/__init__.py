"""Fake upstream AI providers for tests and local demos: simulators, never real providers.

Each fake is a plain ASGI app that speaks one provider's real wire protocol
(paths, bodies, headers, error shapes) with deterministic, made-up output, so
the gateway can be exercised over real HTTP on 127.0.0.1 without network
access, keys or cost. Every fake records what it received and can be told to
fail, hang or drop the connection on demand::

    from fake_upstreams import serve, OpenAIFake

    with serve(OpenAIFake(api_key="sk-upstream")) as fake:
        ...  # point the gateway at fake.base_url
        assert fake.last.json["model"] == "text-embedding-3-small"

Nothing here is a real model, and nothing here should be pointed at by
production configuration.
"""

from .anthropic import AnthropicFake
from .bedrock import BedrockFake
from .brave import BraveFake
from .gemini import GeminiFake
from .openai import OpenAIFake
from .openalex import OpenAlexFake
from .openrouter import OpenRouterFake
from .server import FakeServer, FakeUpstream, RecordedRequest, serve
from .website import WebsiteFake

__all__ = [
    "AnthropicFake",
    "BedrockFake",
    "BraveFake",
    "FakeServer",
    "FakeUpstream",
    "GeminiFake",
    "OpenAIFake",
    "OpenAlexFake",
    "OpenRouterFake",
    "RecordedRequest",
    "WebsiteFake",
    "serve",
]

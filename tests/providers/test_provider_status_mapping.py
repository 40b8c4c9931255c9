"""The spec's provider status mapping, once per adapter: each adapter's `raise_for_response` is
fed the error answers its provider really sends (the fakes' own error shapes).

    400, 422 -> 400 with the provider's sanitized message      404 -> 404, same
    401, 403, 429, 5xx -> 503 "Service temporarily unavailable" (retryable)
    anything else -> 500 "An error occurred"

End to end, once for every adapter and endpoint (the pipeline maps nothing itself):
tests/api/test_embeddings.py's `test_status_mapping` (the client's answer, no Retry-After, the
ledger row at 0 credits).
"""

from __future__ import annotations

import httpx
import pytest

from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE
from fake_upstreams import (
    AnthropicFake,
    BedrockFake,
    BraveFake,
    GeminiFake,
    OpenAIFake,
    OpenAlexFake,
    OpenRouterFake,
)
from fake_upstreams.azure import AzureOpenAIFake
from fake_upstreams.compatible import OpenAICompatibleFake
from inference.providers import adapter_for
from inference.providers.anthropic import AnthropicTransport
from inference.providers.azure import AzureOpenAITransport
from inference.providers.base import (
    ChatProvider,
    ContentBlocked,
    EmbeddingsProvider,
    GeminiEmbedder,
    ImageProvider,
    ProviderFailure,
    ResponsesProvider,
    Transport,
)
from inference.providers.bedrock import BedrockTransport
from inference.providers.gemini import GeminiTransport
from inference.providers.openai import OpenAITransport
from inference.providers.openai_compatible import OpenAICompatibleTransport
from inference.providers.openrouter import OpenRouterTransport
from inference.providers.search import BraveTransport, OpenAlexTransport

ADAPTERS = [
    (OpenAITransport, OpenAIFake),
    (OpenRouterTransport, OpenRouterFake),
    (BedrockTransport, BedrockFake),
    (GeminiTransport, GeminiFake),
    (BraveTransport, BraveFake),
    (OpenAlexTransport, OpenAlexFake),
    (AnthropicTransport, AnthropicFake),
    (AzureOpenAITransport, AzureOpenAIFake),
    (OpenAICompatibleTransport, OpenAICompatibleFake),
]
IDS = [adapter.kind for adapter, _ in ADAPTERS]
MESSAGE = "Bad thing happened."
FORWARDED = [(400, 400), (422, 400), (404, 404)]
UNAVAILABLE = [401, 403, 429, 500, 502, 503, 504, 529]
UNMAPPED = [300, 304, 402, 405, 408, 409, 413, 418, 424, 451]


def answer(fake_class, status, message=None, **extra) -> httpx.Response:
    """The provider's own error answer, as its fake renders it, as httpx received it."""
    rendered = fake_class().error(status, message, **extra)
    return httpx.Response(status, content=rendered.body, headers=rendered.headers)


def mapped(adapter_class, response: httpx.Response) -> ProviderFailure:
    with pytest.raises(ProviderFailure) as excinfo:
        adapter_class().raise_for_response(response)
    return excinfo.value


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
@pytest.mark.parametrize(("upstream", "status"), FORWARDED)
def test_client_errors_forward_the_message(adapter, fake, upstream, status):
    failure = mapped(adapter, answer(fake, upstream, MESSAGE))
    assert (failure.status, failure.message, failure.retryable) == (status, MESSAGE, False)
    assert not isinstance(failure, ContentBlocked)


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
@pytest.mark.parametrize("upstream", UNAVAILABLE)
def test_credentials_limits_and_server_errors_are_503(adapter, fake, upstream):
    failure = mapped(adapter, answer(fake, upstream, MESSAGE))
    assert (failure.status, failure.message, failure.retryable) == (
        503,
        SERVICE_UNAVAILABLE,
        True,
    )


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
@pytest.mark.parametrize("upstream", UNMAPPED)
def test_other_statuses_are_500(adapter, fake, upstream):
    failure = mapped(adapter, answer(fake, upstream, MESSAGE))
    assert (failure.status, failure.message, failure.retryable) == (500, PROVIDER_ERROR, False)


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
def test_success_is_not_an_error(adapter, fake):
    for status in (200, 201, 204):
        adapter().raise_for_response(httpx.Response(status, json={}))


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
def test_messages_are_sanitized(adapter, fake):
    leaky = (
        "Invalid input for OpenAI: see https://platform.openai.com/docs/x or write to "
        "support@openai.com. Amazon Bedrock and Google (Gemini) agree."
    )
    failure = mapped(adapter, answer(fake, 400, leaky))
    assert failure.message == "Invalid input for: see or write to. and agree."
    # The names of the providers of issue 34, and of the servers a campus runs.
    leaky = "Anthropic's Claude, Azure OpenAI by Microsoft, Mistral AI, vLLM and Ollama refused it."
    failure = mapped(adapter, answer(fake, 400, leaky))
    assert failure.message == "'s, by,, and refused it."
    # Nothing left but names: the generic message.
    assert mapped(adapter, answer(fake, 404, "OpenAI https://x.y")).message == PROVIDER_ERROR


@pytest.mark.parametrize(("adapter", "fake"), ADAPTERS, ids=IDS)
def test_unreadable_error_bodies(adapter, fake):
    failure = mapped(adapter, httpx.Response(400, content=b"<html>Bad Request</html>"))
    assert (failure.status, failure.message) == (400, "<html>Bad Request</html>")
    failure = mapped(adapter, httpx.Response(404, content=b""))
    assert (failure.status, failure.message) == (404, PROVIDER_ERROR)
    failure = mapped(adapter, httpx.Response(400, json=[1, 2]))
    assert failure.message == PROVIDER_ERROR


def test_content_moderation_is_content_blocked():
    refusal = answer(OpenAIFake, 400, "Rejected.", code="moderation_blocked")
    assert isinstance(mapped(OpenAITransport, refusal), ContentBlocked)
    refusal = answer(OpenAIFake, 400, "Rejected.", code="content_policy_violation")
    assert isinstance(mapped(OpenAITransport, refusal), ContentBlocked)
    refusal = answer(BedrockFake, 400, "This request has been blocked by our content filters.")
    assert isinstance(mapped(BedrockTransport, refusal), ContentBlocked)
    refusal = answer(GeminiFake, 400, "Blocked: see our Responsible AI practices.")
    assert isinstance(mapped(GeminiTransport, refusal), ContentBlocked)
    # Another 400 of the same providers is not.
    assert not isinstance(mapped(OpenAITransport, answer(OpenAIFake, 400)), ContentBlocked)


def test_gemini_rejecting_the_gateway_key_is_503():
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
    failure = mapped(
        GeminiTransport, answer(GeminiFake, 400, "API key not valid.", details=details)
    )
    assert (failure.status, failure.retryable) == (503, True)


def test_brave_rejecting_the_subscription_token_is_503():
    rejected = answer(BraveFake, 422, "Bad token.", code="SUBSCRIPTION_TOKEN_INVALID")
    failure = mapped(BraveTransport, rejected)
    assert (failure.status, failure.retryable) == (503, True)
    # Its other 422s are the client's.
    assert mapped(BraveTransport, answer(BraveFake, 422, "Bad country.")).status == 400


# --- the declared interface --------------------------------------------------------------------


def test_adapters_declare_their_capabilities():
    assert isinstance(adapter_for("openai", ChatProvider), OpenAITransport)
    for capability in (ChatProvider, ResponsesProvider, EmbeddingsProvider, ImageProvider):
        adapter_for("openai", capability)
    for capability in (ChatProvider, ResponsesProvider, EmbeddingsProvider):
        adapter_for("openrouter", capability)
    adapter_for("gemini", GeminiEmbedder)
    for capability in (ChatProvider, ResponsesProvider):
        adapter_for("anthropic", capability)
    for capability in (ChatProvider, ResponsesProvider, ImageProvider):
        adapter_for("bedrock", capability)
    assert adapter_for("openai").stateful_responses is True
    assert adapter_for("openrouter").stateful_responses is False


@pytest.mark.parametrize(
    ("kind", "capability"),
    [
        ("bedrock", EmbeddingsProvider),
        ("gemini", EmbeddingsProvider),
        ("openrouter", GeminiEmbedder),
    ],
)
def test_a_missing_capability_is_a_500_not_a_probe(kind, capability):
    with pytest.raises(ProviderFailure) as excinfo:
        adapter_for(kind, capability)
    assert (excinfo.value.status, excinfo.value.message) == (500, PROVIDER_ERROR)


def test_an_unknown_kind_raises():
    with pytest.raises(ProviderFailure) as excinfo:
        adapter_for("carrier-pigeon")
    assert excinfo.value.status == 500
    assert isinstance(adapter_for("bedrock"), Transport)

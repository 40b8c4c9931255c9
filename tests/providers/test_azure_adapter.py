"""The `azure_openai` and `openai_compatible` adapters without a server (no database): the URL,
headers and body each sends per connection options, and what each makes of its provider's
errors (the fakes' own error bodies), on the spec's status table."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE
from fake_upstreams.azure import AzureOpenAIFake
from fake_upstreams.compatible import OpenAICompatibleFake
from fake_upstreams.server import ApiError
from inference.providers import adapter_for
from inference.providers.azure import CONTENT_FILTERED, AzureOpenAITransport, deployment_for
from inference.providers.base import ChatProvider, ContentBlocked, ResponsesProvider, Transport
from inference.providers.openai_compatible import OpenAICompatibleTransport

from .test_adapters import ok, route, run, wired
from .test_provider_status_mapping import answer, mapped

ENDPOINT = "https://school.openai.azure.com"
HELLO = [{"role": "user", "content": "hi"}]


def with_options(r, options: dict):
    return replace(r, connection=replace(r.connection, options=options))


def azure(upstream="gpt-4o-mini", **options):
    return with_options(route("azure_openai", upstream, base_url=ENDPOINT), options)


def compatible(**options):
    base = route("openai_compatible", "llama", base_url="http://gpu.campus:8000/v1", api_key="")
    return with_options(base, options)


# --- azure: paths, auth, the deployment ----------------------------------------------------


@pytest.mark.parametrize(
    ("options", "method", "url"),
    [
        ({}, "chat", f"{ENDPOINT}/openai/v1/chat/completions"),
        ({}, "responses", f"{ENDPOINT}/openai/v1/responses"),
        ({}, "embeddings", f"{ENDPOINT}/openai/v1/embeddings"),
        (
            {"api_version": "2024-10-21"},
            "chat",
            f"{ENDPOINT}/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21",
        ),
        (
            {"api_version": "2024-10-21"},
            "embeddings",
            f"{ENDPOINT}/openai/deployments/gpt-4o-mini/embeddings?api-version=2024-10-21",
        ),
        (
            {"api_version": "2025-04-01-preview"},
            "responses",
            f"{ENDPOINT}/openai/responses?api-version=2025-04-01-preview",
        ),
    ],
)
def test_azure_url_styles(options, method, url):
    adapter, calls = wired(AzureOpenAITransport, ok({"id": "x"}))
    body = {"model": "gpt-4o-mini", "messages": HELLO, "input": "hi"}
    run(getattr(adapter, method)(azure(**options), body))
    (call,) = calls.calls
    assert call.url == url
    assert call.headers["api-key"] == "sk-test" and "Authorization" not in call.headers
    assert call.body["model"] == "gpt-4o-mini"  # the deployment, on both styles


def test_azure_deployment_map_names_the_deployment():
    options = {"api_version": "2024-10-21", "deployments": {"gpt-4o-mini": "mini-eu"}}
    adapter, calls = wired(AzureOpenAITransport, ok({"id": "x"}), ok({"id": "y"}))
    run(adapter.chat(azure(**options), {"model": "gpt-4o-mini", "messages": HELLO}))
    run(adapter.chat(azure(deployments={"gpt-4o-mini": "mini-eu"}), {"model": "gpt-4o-mini"}))
    classic, v1 = calls.calls
    assert "/openai/deployments/mini-eu/chat/completions?" in classic.url
    assert (v1.url, v1.body["model"]) == (f"{ENDPOINT}/openai/v1/chat/completions", "mini-eu")
    # A name that is not in the map: the row's upstream id; odd characters quoted in the URL.
    assert deployment_for(azure("gpt-4.1", deployments={"gpt-4o-mini": "x"})) == "gpt-4.1"


def test_azure_stream_and_effort(monkeypatch):
    opened = {}

    async def open_stream(self, route, path, body):
        opened.update(path=path, body=body)
        return "response"

    monkeypatch.setattr(Transport, "open_stream", open_stream)
    body = {"model": "o4-mini", "messages": HELLO, "reasoning": {"effort": "low"}}
    route_ = azure("o4-mini", api_version="2024-10-21")
    stream = run(AzureOpenAITransport().chat_stream(route_, body))
    assert stream.decoder is None  # OpenAI's chunks: relayed as they come
    assert opened["path"] == "/openai/deployments/o4-mini/chat/completions?api-version=2024-10-21"
    assert opened["body"] == {"model": "o4-mini", "messages": HELLO, "reasoning_effort": "low"}


def test_azure_capabilities():
    adapter = adapter_for("azure_openai")
    assert isinstance(adapter, ChatProvider) and isinstance(adapter, ResponsesProvider)
    assert adapter.stateful_responses  # Azure's Responses API stores responses
    assert not adapter.checks_requests  # OpenAI's bodies: every contract field has its place


# --- azure: errors -------------------------------------------------------------------------


def _filter_400() -> httpx.Response:
    with pytest.raises(ApiError) as raised:  # the fake's prompt filter: Azure's own answer
        AzureOpenAIFake()._prompt_filter(
            {"messages": [{"role": "user", "content": "forbidden-topic"}]}
        )
    rendered = raised.value.response
    return httpx.Response(400, content=rendered.body, headers=rendered.headers)


def test_azure_content_filter_is_a_clear_400():
    failure = mapped(AzureOpenAITransport, _filter_400())
    assert isinstance(failure, ContentBlocked)
    assert (failure.status, failure.message) == (400, CONTENT_FILTERED)
    assert not failure.retryable


@pytest.mark.parametrize(
    ("status", "extra", "client_status", "message"),
    [
        (400, {"code": "BadRequest"}, 400, "API version not supported"),
        (404, {"code": "DeploymentNotFound"}, 404, "The API deployment for this resource"),
        (404, {}, 404, "Resource not found"),
        (401, {}, 503, SERVICE_UNAVAILABLE),
        (403, {}, 503, SERVICE_UNAVAILABLE),
        (429, {}, 503, SERVICE_UNAVAILABLE),
        (500, {}, 503, SERVICE_UNAVAILABLE),
        (408, {}, 500, PROVIDER_ERROR),
    ],
)
def test_azure_status_mapping(status, extra, client_status, message):
    texts = {400: "API version not supported", 404: None}
    if extra.get("code") == "DeploymentNotFound":
        texts[404] = "The API deployment for this resource does not exist."
    response = answer(AzureOpenAIFake, status, texts.get(status), **extra)
    failure = mapped(AzureOpenAITransport, response)
    assert failure.status == client_status
    assert failure.message.startswith(message)
    assert "Azure" not in failure.message and "OpenAI" not in failure.message


def test_azure_model_errors_are_forwarded_scrubbed():
    body = AzureOpenAIFake().error(
        400, "Azure OpenAI: 'temperature' is invalid.", type="invalid_request_error", param="t"
    )
    failure = mapped(AzureOpenAITransport, httpx.Response(400, content=body.body))
    assert failure.status == 400 and "'temperature' is invalid." in failure.message
    assert "Azure" not in failure.message and "OpenAI" not in failure.message


# --- openai_compatible ---------------------------------------------------------------------


def test_compatible_sends_no_authorization_without_a_key_and_a_portable_body():
    adapter, calls = wired(OpenAICompatibleTransport, ok({"id": "a"}), ok({"id": "b"}))
    body = {
        "model": "llama",
        "messages": HELLO,
        "max_completion_tokens": 50,
        "metadata": {"k": "v"},
        "store": True,
        "user": "u1",
        "seed": 3,
        "reasoning": {"effort": "low"},
    }
    run(adapter.chat(compatible(), dict(body)))
    keyed = route("openai_compatible", "llama", api_key="sk-campus")
    run(adapter.chat(keyed, {"model": "llama", "messages": HELLO, "max_tokens": 9}))
    first, second = calls.calls
    assert first.url == "http://gpu.campus:8000/v1/chat/completions"
    assert "Authorization" not in first.headers
    assert first.body == {
        "model": "llama",
        "messages": HELLO,
        "max_tokens": 50,
        "seed": 3,
        "reasoning_effort": "low",
    }
    assert second.headers["Authorization"] == "Bearer sk-campus"
    assert second.body["max_tokens"] == 9


@pytest.mark.parametrize(("options", "sent"), [({}, True), ({"stream_usage": "always"}, False)])
def test_compatible_stream_options(options, sent):
    adapter = OpenAICompatibleTransport()
    payload = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    assert ("stream_options" in adapter.compatible_payload(compatible(**options), payload)) is sent


def test_compatible_responses_native_or_translated():
    adapter, calls = wired(OpenAICompatibleTransport, ok({"id": "resp", "output": []}))
    native = compatible(responses_api="native")
    payload = {"model": "llama", "input": "hi", "metadata": {"a": "b"}}
    assert run(adapter.responses(native, payload)) == {"id": "resp", "output": []}
    (call,) = calls.calls
    assert call.url == "http://gpu.campus:8000/v1/responses"
    assert call.body == {"model": "llama", "input": "hi", "store": False}
    assert adapter.stateful_responses is False  # previous_response_id: the spec's 400 on both


@pytest.mark.parametrize(
    ("response", "status", "message"),
    [
        (answer(OpenAICompatibleFake, 400, "max_tokens is too large"), 400, "max_tokens is too"),
        (answer(OpenAICompatibleFake, 404, "The model `x` does not exist."), 404, "The model `x`"),
        (httpx.Response(404, json={"detail": "Not Found"}), 404, "Not Found"),
        (
            httpx.Response(400, json={"error": "Input validation error", "error_type": "v"}),
            400,
            "Input validation error",
        ),  # fmt: skip
        (
            httpx.Response(
                422,
                json={
                    "object": "error",
                    "message": {
                        "detail": [
                            {
                                "type": "extra_forbidden",
                                "loc": ["body", "stream_options"],
                                "msg": "Extra inputs are not permitted",
                            }
                        ]
                    },
                },
            ),
            400,
            "stream_options: Extra inputs are not permitted",
        ),
        (httpx.Response(401, json={"error": "Unauthorized"}), 503, SERVICE_UNAVAILABLE),
        (httpx.Response(502, text="Bad gateway"), 503, SERVICE_UNAVAILABLE),
    ],
    ids=["vllm-400", "vllm-404", "fastapi-404", "tgi-400", "mistral-422", "401", "502"],
)
def test_compatible_error_bodies(response, status, message):
    failure = mapped(OpenAICompatibleTransport, response)
    assert failure.status == status and failure.message.startswith(message)


@pytest.mark.parametrize(
    ("message", "scrubbed"),
    [
        ("Microsoft Azure OpenAI: quota exceeded.", "quota exceeded."),
        ("Mistral AI rejected the request.", "rejected the request."),
        ("The model `mistral-small` does not exist.", "The model `mistral-small` does not exist."),
    ],
)
def test_new_provider_names_are_scrubbed(message, scrubbed):
    from inference.providers.base import sanitize_message

    assert sanitize_message(message).lstrip(": ") == scrubbed

"""The Azure OpenAI and OpenAI-compatible fakes checked against the `openai` SDK pointed at
them (no gateway, no database): the SDK's `AzureOpenAI` client on the classic deployment
paths, the plain `OpenAI` client on Azure's v1 path and on a keyless vLLM-style server."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fixtures_compat import AZURE_API_VERSION, AZURE_KEY, HELLO, WEATHER


def azure_client(fake, key=AZURE_KEY, version=AZURE_API_VERSION, deployment="gpt-4o-mini"):
    return openai.AzureOpenAI(
        api_key=key,
        api_version=version,
        azure_endpoint=fake.origin,
        azure_deployment=deployment,
        max_retries=0,
    )


def v1_client(fake, key=AZURE_KEY):
    return openai.OpenAI(api_key=key, base_url=fake.origin + "/openai/v1", max_retries=0)


def test_classic_chat_with_deployment_and_api_version(azure_upstream):
    answer = azure_client(azure_upstream).chat.completions.create(model="ignored", messages=HELLO)
    assert answer.choices[0].message.content == "Echo: hello big world"
    assert answer.model == "gpt-4o-mini-2024-07-18"
    assert answer.model_extra["prompt_filter_results"][0]["prompt_index"] == 0
    assert answer.choices[0].model_extra["content_filter_results"]["hate"]["filtered"] is False
    sent = azure_upstream.last
    assert sent.path == "/openai/deployments/gpt-4o-mini/chat/completions"
    assert sent.query == {"api-version": AZURE_API_VERSION}
    assert sent.headers["api-key"] == AZURE_KEY and "authorization" not in sent.headers


def test_classic_stream_opens_with_the_prompt_filter_chunk(azure_upstream):
    client = azure_client(azure_upstream)
    chunks = list(
        client.chat.completions.create(
            model="x", messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices == [] and chunks[0].model_extra["prompt_filter_results"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello big world"
    assert chunks[-1].usage.prompt_tokens > 0


def test_v1_path_with_the_plain_client(azure_upstream):
    client = v1_client(azure_upstream)
    answer = client.chat.completions.create(model="gpt-4.1", messages=HELLO, tools=[WEATHER])
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and answer.choices[0].finish_reason == "tool_calls"
    assert azure_upstream.last.path == "/openai/v1/chat/completions"
    assert azure_upstream.last.query == {}
    response = client.responses.create(model="gpt-4o-mini", input="hello big world")
    assert response.output_text == "Echo: hello big world"
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["a b", "c"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 1536


def test_classic_responses_and_embeddings(azure_upstream):
    client = azure_client(azure_upstream, deployment="text-embedding-3-small")
    vectors = client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert len(vectors.data[0].embedding) == 1536
    assert azure_upstream.last.path == "/openai/deployments/text-embedding-3-small/embeddings"
    response = azure_client(azure_upstream).responses.create(model="gpt-4o-mini", input="hi there")
    assert response.output_text == "Echo: hi there"
    assert azure_upstream.last.path == "/openai/responses"
    assert azure_upstream.last.query == {"api-version": AZURE_API_VERSION}


@pytest.mark.parametrize(
    ("client", "error", "code"),
    [
        (lambda f: azure_client(f, key="wrong"), openai.AuthenticationError, "401"),
        (lambda f: azure_client(f, deployment="nope"), openai.NotFoundError, "DeploymentNotFound"),
        (lambda f: azure_client(f, version="2023-01-01"), openai.BadRequestError, "BadRequest"),
    ],
    ids=["key", "deployment", "api-version"],
)
def test_azure_errors(azure_upstream, client, error, code):
    with pytest.raises(error) as raised:
        client(azure_upstream).chat.completions.create(model="x", messages=HELLO)
    assert raised.value.body["code"] == code


def test_classic_path_without_api_version_is_not_found(azure_upstream):
    response = httpx.post(
        azure_upstream.origin + "/openai/deployments/gpt-4o-mini/chat/completions",
        json={"messages": HELLO},
        headers={"api-key": AZURE_KEY},
    )
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "404", "message": "Resource not found"}}


def test_content_filter_on_the_prompt_and_on_the_answer(azure_upstream):
    client = azure_client(azure_upstream)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "tell me a forbidden-topic"}]
        )
    assert raised.value.code == "content_filter"
    assert raised.value.body["innererror"]["content_filter_result"]["violence"]["filtered"]
    azure_upstream.filter_completion = True
    answer = client.chat.completions.create(model="x", messages=HELLO)
    assert answer.choices[0].finish_reason == "content_filter"
    assert answer.choices[0].message.content == "Echo: hello"
    chunks = list(client.chat.completions.create(model="x", messages=HELLO, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and text != "Echo: hello big world"


# --- a keyless OpenAI-compatible server -----------------------------------------------------


def compatible_client(fake):
    return openai.OpenAI(api_key="unused", base_url=fake.base_url, max_retries=0)


def test_compatible_models_list(compatible_upstream):
    models = compatible_client(compatible_upstream).models.list()
    assert [m.id for m in models] == ["meta-llama/Llama-3.1-8B-Instruct", "mistral-small"]
    assert {m.owned_by for m in models} == {"vllm"}


def test_compatible_chat_and_stream(compatible_upstream):
    client = compatible_client(compatible_upstream)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    answer = client.chat.completions.create(model=model, messages=HELLO)
    assert answer.choices[0].message.content == "Echo: hello big world"
    assert answer.model == model
    chunks = list(
        client.chat.completions.create(
            model=model, messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello big world"
    )
    assert chunks[-1].usage.completion_tokens > 0


def test_compatible_errors(compatible_upstream):
    client = compatible_client(compatible_upstream)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert raised.value.body["message"] == "The model `gpt-4o` does not exist."
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="mistral-small", input="hi")
    assert compatible_upstream.last.path == "/v1/responses"


def test_classic_responses_need_a_recent_api_version(azure_upstream):
    with pytest.raises(openai.BadRequestError):
        azure_client(azure_upstream, version="2024-10-21").responses.create(
            model="gpt-4o-mini", input="hi"
        )

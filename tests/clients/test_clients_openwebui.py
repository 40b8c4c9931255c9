"""Open WebUI's requests to an OpenAI-compatible connection, replayed with httpx against the
live gateway and the OpenAI simulator, exactly as Open WebUI builds them.

Read from Open WebUI 0.12.4 (PyPI sdist open_webui-0.12.4.tar.gz, released 2026-10-25):
- backend/open_webui/routers/openai.py: `send_get_request` (GET {url}/models),
  `generate_chat_completion` (POST {url}/chat/completions: the body Open WebUI's middleware
  built, `metadata` popped, `stream_options` dropped unless streaming, o-series models get
  `max_completion_tokens` and a `developer` first message);
- backend/open_webui/main.py `chat_completion` (`stream_options.include_usage` when the model's
  "usage" capability is on) and utils/payload.py `apply_params_to_form_data` (every chat
  parameter a user sets, Ollama ones such as `num_ctx` and `keep_alive` included, becomes a
  top-level body key for an OpenAI connection), utils/middleware.py (native tool calling sends
  `tools`, then the assistant `tool_calls` message and `tool` messages;
  `process_messages_with_output` strips the UI's keys from messages);
- backend/open_webui/routers/tasks.py (title, tags and follow-up generation: one user message,
  `stream: false`);
- backend/open_webui/retrieval/utils.py `generate_openai_batch_embeddings`
  (RAG_EMBEDDING_ENGINE=openai: `{"input": [...], "model": ...}`, no `encoding_format`);
- backend/open_webui/routers/images.py `image_generations` (IMAGE_GENERATION_ENGINE=openai:
  `{"model", "prompt", "n", "size"}`, `response_format: b64_json` only for models not matching
  `^gpt-image`; the default size is 512x512);
- backend/open_webui/utils/headers.py (the X-OpenWebUI-User-* headers when
  ENABLE_FORWARD_USER_INFO_HEADERS is on).
"""

from __future__ import annotations

import json

import pytest

from licensing.models import Transaction
from tests.client_helpers import assert_charged, provider_calls, valid_weather_args

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
JSON = {"Content-Type": "application/json"}
# ENABLE_FORWARD_USER_INFO_HEADERS=true: who the Open WebUI user is (not a credential).
USER_INFO = {
    "X-OpenWebUI-User-Name": "Ada Lovelace",
    "X-OpenWebUI-User-Id": "5f0c8a52-0d1e-4c4e-9a57-2f7f0e6c1b11",
    "X-OpenWebUI-User-Email": "ada@school.example",
    "X-OpenWebUI-User-Role": "user",
}
CHAT_ID = {"X-OpenWebUI-Chat-Id": "8b1d2c6e-7f4a-4d8e-b3a1-0c9e5d2f4a77"}
WEATHER_SPEC = {  # a workspace tool's spec, as Open WebUI generates it from the tool's Python
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
}


@pytest.fixture
def headers(api_key):
    return {"Authorization": f"Bearer {api_key}", **JSON, **USER_INFO}


def sse_payloads(response) -> list:
    """The `data:` payloads of a streamed answer, `[DONE]` as the string."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def streamed_chat(client, headers, body):
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        return sse_payloads(response)


def test_model_list(client, headers, catalog):
    response = client.get("/v1/models", headers=headers)
    assert response.status_code == 200
    models = response.json()["data"]
    # Open WebUI keeps every entry with an `id` (or `name`) and shows it in the model picker.
    assert all(isinstance(model["id"], str) and model["object"] == "model" for model in models)
    assert {MINI, "o4-mini", "text-embedding-3-small", "gpt-image-1"} <= {m["id"] for m in models}
    assert "amazon.titan-embed-text-v2:0" not in {m["id"] for m in models}  # no cloud connection


def test_streamed_chat_with_its_extra_fields(client, headers, catalog):
    body = {
        "model": MINI,
        "messages": [
            {"role": "system", "content": "You are a patient tutor."},
            {"role": "user", "content": "Explain photosynthesis in one sentence."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},  # the model's "usage" capability on
        # Chat controls a user set (Open WebUI copies them to the body for OpenAI connections).
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 256,
        "seed": 42,
        "frequency_penalty": 0.1,
        "stop": ["###"],
    }
    payloads = streamed_chat(client, {**headers, **CHAT_ID}, body)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text
    (usage,) = [c["usage"] for c in chunks if not c["choices"]]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0

    (sent,) = provider_calls(catalog["direct"], "/v1/chat/completions")
    assert {key: sent[key] for key in ("temperature", "max_tokens", "seed", "stop")} == {
        "temperature": 0.7,
        "max_tokens": 256,
        "seed": 42,
        "stop": ["###"],
    }
    assert_charged(1, "chat_completions", answer_ids=[chunks[0]["id"]], model=MINI)


def test_o_series_chat_as_open_webui_rewrites_it(client, headers, catalog):
    body = {  # openai_reasoning_model_handler: max_completion_tokens, a developer message
        "model": "o4-mini",
        "messages": [
            {"role": "developer", "content": "You are a patient tutor."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
        "stream": True,
        "max_completion_tokens": 512,
        "reasoning_effort": "low",
    }
    payloads = streamed_chat(client, headers, body)
    assert payloads[-1] == "[DONE]"
    assert_charged(1, "chat_completions", model="o4-mini")


def test_native_tool_calling_loop(client, headers, catalog):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    tools = [{"type": "function", "function": WEATHER_SPEC}]
    payloads = streamed_chat(
        client, headers, {"model": MINI, "messages": question, "stream": True, "tools": tools}
    )
    deltas = [
        call
        for chunk in payloads[:-1]
        if chunk["choices"]
        for call in chunk["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert deltas and deltas[0]["function"]["name"] == "get_weather"
    call_id = deltas[0]["id"]
    arguments = "".join(d["function"].get("arguments") or "" for d in deltas)
    valid_weather_args(arguments)

    # convert_output_to_messages: the assistant's tool_calls, then the tool's output.
    follow_up = question + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "Sunny, 21 degrees."},
    ]
    payloads = streamed_chat(
        client, headers, {"model": MINI, "messages": follow_up, "stream": True, "tools": tools}
    )
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in payloads[:-1] if c["choices"]
    )
    assert text
    assert_charged(2, "chat_completions", model=MINI)


# routers/tasks.py: the chat's title, tags and follow-ups, each asked in one user message.
TASKS = [
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history."
    '\n### Output:\nJSON format: { "title": "your concise title here" }',
    "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history."
    '\n### Output:\nJSON format: { "tags": ["tag1", "tag2", "tag3"] }',
    "### Task:\nSuggest 3-5 relevant follow-up questions or prompts.\n### Output:\n"
    'JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }',
]


def test_background_tasks(client, headers, catalog):
    ids = []
    for task in TASKS:
        body = {"model": MINI, "messages": [{"role": "user", "content": task}], "stream": False}
        response = client.post("/v1/chat/completions", json=body, headers={**headers, **CHAT_ID})
        assert response.status_code == 200, response.text
        answer = response.json()
        assert isinstance(answer["choices"][0]["message"]["content"], str)
        ids.append(answer["id"])
    assert_charged(len(TASKS), "chat_completions", answer_ids=ids, model=MINI)


def test_rag_embeddings(client, api_key, catalog):
    # requests.post(f"{url}/embeddings", headers=get_json_bearer_headers(key), json=...):
    # the default RAG_EMBEDDING_BATCH_SIZE is 1; larger batches send several texts.
    body = {
        "input": ["Chloroplasts capture light.", "Water is split."],
        "model": "text-embedding-3-small",
    }
    response = client.post(
        "/v1/embeddings", json=body, headers={"Authorization": f"Bearer {api_key}", **JSON}
    )
    assert response.status_code == 200, response.text
    vectors = [item["embedding"] for item in response.json()["data"]]
    assert [len(v) for v in vectors] == [1536, 1536] and isinstance(vectors[0][0], float)
    assert_charged(1, "embeddings", model="text-embedding-3-small")


def test_image_generation_with_gpt_image_1(client, headers, catalog):
    body = {
        "model": "gpt-image-1",
        "prompt": "A diagram of a plant cell",
        "n": 1,
        "size": "512x512",
    }
    response = client.post("/v1/images/generations", json=body, headers=headers)
    assert response.status_code == 200, response.text
    (image,) = response.json()["data"]
    assert image["b64_json"]  # Open WebUI reads `url`, else `b64_json`
    assert_charged(1, "image_generation", model="gpt-image-1")


# Chat controls Open WebUI sends to an OpenAI connection as they are (Ollama's names).
OLLAMA_PARAMETERS = {
    "num_ctx": 8192,
    "keep_alive": "5m",
    "top_k": 40,
    "repeat_penalty": 1.1,
    "options": {"num_ctx": 8192},
}


def test_ollama_parameters_are_refused_clearly(client, headers, catalog):
    body = {"model": MINI, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for field, value in OLLAMA_PARAMETERS.items():
        response = client.post("/v1/chat/completions", json={**body, field: value}, headers=headers)
        assert response.status_code == 422, field
        problem = response.json()
        assert problem["detail"][0]["type"] == "extra_forbidden"
        assert problem["detail"][0]["loc"] == ["body", field]
        error = problem["error"]  # what Open WebUI shows the user: error.message
        assert error["param"] == field and error["message"].startswith(f"{field}: "), error
    assert not provider_calls(catalog["direct"], "/v1/chat/completions")
    assert not Transaction.objects.filter(credits__gt=0).exists()

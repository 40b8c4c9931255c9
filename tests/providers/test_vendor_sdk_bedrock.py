"""The Bedrock fake's Converse and ConverseStream checked with AWS's own SDK (boto3's
`bedrock-runtime` client, SigV4-signed, its event-stream parser), without the gateway: the fake
cannot drift from the protocol the adapter is written against."""

from __future__ import annotations

import json

import pytest

# The `vendors` extra: a `.[dev]` environment skips this module instead of failing to collect.
pytest.importorskip("boto3")

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from tests.conftest import AWS_ACCESS_KEY, AWS_REGION, AWS_SECRET_KEY

LLAMA = "us.meta.llama3-3-70b-instruct-v1:0"
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE_ARN = (
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
    "us.anthropic.claude-haiku-4-5-20251001-v1:0"
)
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "Current weather in a city",
                "inputSchema": {"json": WEATHER},
            }
        },
        {
            "toolSpec": {
                "name": "get_time",
                "description": "Local time in a city",
                "inputSchema": {"json": WEATHER},
            }
        },
    ]
}
QUESTION = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]


@pytest.fixture(scope="module")
def runtime(bedrock_upstream):
    return boto3.client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=bedrock_upstream.origin,
        aws_access_key_id=AWS_ACCESS_KEY,
        aws_secret_access_key=AWS_SECRET_KEY,
        config=Config(retries={"total_max_attempts": 1}),
    )


@pytest.fixture
def fake(bedrock_upstream):
    bedrock_upstream.reset()
    yield bedrock_upstream
    bedrock_upstream.reset()


def test_converse_text(runtime, fake):
    answer = runtime.converse(
        modelId=LLAMA,
        system=[{"text": "Be brief."}],
        messages=[{"role": "user", "content": [{"text": "hello there"}]}],
        inferenceConfig={"maxTokens": 50, "temperature": 0.2},
    )
    assert answer["output"]["message"] == {
        "role": "assistant",
        "content": [{"text": "Echo: hello there"}],
    }
    assert answer["stopReason"] == "end_turn"
    assert answer["usage"] == {"inputTokens": 4, "outputTokens": 3, "totalTokens": 7}
    assert fake.last_signature_valid is True


def test_a_tool_loop_by_an_inference_profile_arn(runtime, fake):
    first = runtime.converse(modelId=CLAUDE_ARN, messages=QUESTION, toolConfig=TOOLS)
    assert first["stopReason"] == "tool_use"
    use = first["output"]["message"]["content"][0]["toolUse"]
    assert (use["name"], use["input"]) == ("get_weather", {"city": "Paris"})
    result = {"toolUseId": use["toolUseId"], "content": [{"text": "Sunny"}], "status": "success"}
    messages = [
        *QUESTION,
        first["output"]["message"],
        {"role": "user", "content": [{"toolResult": result}]},
    ]
    second = runtime.converse(modelId=CLAUDE_ARN, messages=messages, toolConfig=TOOLS)
    assert second["output"]["message"]["content"] == [
        {"text": "The get_weather tool returned: Sunny"}
    ]
    assert fake.last.raw_path.startswith("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A")


def test_converse_stream_with_parallel_tool_calls(runtime, fake):
    fake.parallel_calls = True
    answer = runtime.converse_stream(modelId=CLAUDE, messages=QUESTION, toolConfig=TOOLS)
    events = list(answer["stream"])
    kinds = [next(iter(event)) for event in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    starts = [
        e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e
    ]
    assert [start["name"] for start in starts] == ["get_weather", "get_time"]
    arguments: dict[int, str] = {}
    for event in events:
        delta = event.get("contentBlockDelta")
        if delta and "toolUse" in delta["delta"]:
            index = delta["contentBlockIndex"]
            arguments[index] = arguments.get(index, "") + delta["delta"]["toolUse"]["input"]
    assert [json.loads(a) for a in arguments.values()] == [{"city": "Paris"}] * 2
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"


def test_thinking_structured_output_and_cache_usage(runtime, fake):
    fake.cache_read_tokens, fake.cache_write_tokens = 3, 2
    answer = runtime.converse(
        modelId=CLAUDE,
        messages=QUESTION,
        additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        outputConfig={
            "textFormat": {
                "type": "json_schema",
                "structure": {"jsonSchema": {"schema": json.dumps(WEATHER), "name": "weather"}},
            }
        },
    )
    reasoning, text = answer["output"]["message"]["content"]
    assert reasoning["reasoningContent"]["reasoningText"]["text"].startswith("The user asks")
    assert set(json.loads(text["text"])) == {"city"}
    usage = answer["usage"]
    assert (usage["cacheReadInputTokens"], usage["cacheWriteInputTokens"]) == (3, 2)
    assert usage["inputTokens"] == 6 - 5  # the prompt's six words, five of them cached
    assert usage["totalTokens"] == 6 + usage["outputTokens"]


def test_an_exception_frame_mid_stream_is_the_sdks_event_stream_error(runtime, fake):
    fake.stream_fail_after, fake.stream_fail_mode = 2, "error_event"
    fake.stream_exception = "throttlingException"
    answer = runtime.converse_stream(modelId=LLAMA, messages=QUESTION)
    received = []
    with pytest.raises(EventStreamError) as caught:
        for event in answer["stream"]:
            received.append(event)
    assert caught.value.response["Error"]["Code"] == "throttlingException"
    assert len(received) == 2


@pytest.mark.parametrize(
    "prepare,code",
    [
        (lambda fake: fake.fail_next(429), "ThrottlingException"),
        (lambda fake: fake.fail_next(503), "ServiceUnavailableException"),
        (lambda fake: fake.denied_models.add(LLAMA), "AccessDeniedException"),
        (lambda fake: None, "ValidationException"),  # an unknown model id
    ],
)
def test_errors_are_the_sdks_client_errors(runtime, fake, prepare, code):
    prepare(fake)
    model = "meta.llama9-unknown-v1:0" if code == "ValidationException" else LLAMA
    with pytest.raises(ClientError) as caught:
        runtime.converse(modelId=model, messages=QUESTION)
    assert caught.value.response["Error"]["Code"] == code


def test_requests_converse_refuses(runtime, fake):
    call = {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {}}}
    messages = [*QUESTION, {"role": "assistant", "content": [call]}]
    with pytest.raises(ClientError, match="toolConfig field must be defined"):
        runtime.converse(modelId=LLAMA, messages=messages)
    with pytest.raises(ClientError, match="Thinking may not be enabled"):
        runtime.converse(
            modelId=CLAUDE,
            messages=QUESTION,
            toolConfig={**TOOLS, "toolChoice": {"any": {}}},
            additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}},
        )

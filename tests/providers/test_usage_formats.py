"""One usage parser per wire format (inference/providers/usage.py): the shapes providers send,
and a malformed block is a malformed answer (500 "An error occurred"), never a wrong charge."""

from __future__ import annotations

import httpx
import pytest

from core.errors import PROVIDER_ERROR
from inference.billing import Usage
from inference.providers import usage
from inference.providers.base import ProviderFailure


def test_openai_chat():
    block = {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert usage.openai_chat(block) == Usage(
        prompt_tokens=12, completion_tokens=5, total_tokens=17, cached_tokens=4
    )
    assert usage.openai_chat(None) == Usage(0, 0, 0, 0)
    assert usage.openai_chat({"prompt_tokens_details": None}) == Usage(0, 0, 0, 0)


def test_openai_responses():
    block = {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 4,
        "total_tokens": 13,
    }
    assert usage.openai_responses(block) == Usage(9, 4, 13, 3)
    # The hosted web searches of the answer's output are its units.
    output = [
        {"type": "reasoning", "id": "rs_1"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "web_search_call", "id": "ws_2", "status": "failed"},
        {"type": "message", "id": "msg_1", "content": []},
    ]
    assert usage.openai_responses(block, output).units == 2
    assert usage.openai_responses(block, output[-1:]).units is None
    assert usage.hosted_searches("not a list") == 0


def test_openai_embeddings_and_images():
    assert usage.openai_embeddings({"prompt_tokens": 7, "total_tokens": 7}) == Usage(
        prompt_tokens=7, total_tokens=7
    )
    assert usage.openai_images({"input_tokens": 10, "output_tokens": 272}) == Usage(
        prompt_tokens=10, completion_tokens=272, total_tokens=282
    )
    assert usage.openai_images({"input_tokens": 10}) is None  # no token counts
    assert usage.openai_images(None) is None


def test_gemini_and_bedrock():
    metadata = {"promptTokenCount": 8, "candidatesTokenCount": 1290, "thoughtsTokenCount": 10}
    assert usage.gemini(metadata) == Usage(
        prompt_tokens=8, completion_tokens=1300, total_tokens=1308
    )
    assert usage.gemini_count({"totalTokens": 6}) == 6
    titan = usage.bedrock_embeddings({"inputTextTokenCount": 5}, httpx.Headers())
    cohere = usage.bedrock_embeddings({}, httpx.Headers({"X-Amzn-Bedrock-Input-Token-Count": "11"}))
    assert (titan.prompt_tokens, cohere.prompt_tokens) == (5, 11)


@pytest.mark.parametrize(
    "parse,block",
    [
        (usage.openai_chat, {"prompt_tokens": -1}),
        (usage.openai_chat, {"prompt_tokens": True}),
        (usage.openai_chat, {"prompt_tokens": "many"}),
        (usage.openai_chat, {"prompt_tokens": float("inf")}),
        (usage.openai_chat, {"prompt_tokens": [1]}),
        (usage.openai_chat, {"prompt_tokens_details": [1]}),
        (usage.openai_chat, ["prompt_tokens"]),
        (usage.openai_responses, {"output_tokens": {"n": 1}}),
        (usage.openai_embeddings, "12"),
        (usage.openai_images, {"output_tokens": "x"}),
        (usage.gemini, {"promptTokenCount": -3}),
        (usage.gemini_count, {}),
        (usage.gemini_count, []),
    ],
)
def test_malformed_usage_is_a_malformed_answer(parse, block):
    with pytest.raises(ProviderFailure) as excinfo:
        parse(block)
    assert (excinfo.value.status, excinfo.value.message) == (500, PROVIDER_ERROR)

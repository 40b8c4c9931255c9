"""The steps split out of the answer readers, without a server: a Converse answer's content
blocks, a Gemini flash-image request and answer, the Responses relay's error and final events,
a Responses request's checks against a stateless provider, and an image answer's billing."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from types import SimpleNamespace

import orjson
import pytest

from core.errors import BadRequest
from inference.endpoints.images import _billed_usage, _entry
from inference.endpoints.responses import (
    CONVERSATION_MESSAGE,
    ITEM_REFERENCE_MESSAGE,
    STATELESS_MESSAGE,
    _check_state,
    _input_modalities,
)
from inference.providers.base import GeneratedImages, ProviderFailure
from inference.providers.converse import JSON_TOOL, Plan, _answer_parts
from inference.providers.gemini import _flash_image_parts, flash_image_payload, flash_images
from inference.schemas.responses import ResponseRequest
from inference.streaming import ResponsesSSE, StreamOutcome

from .test_routing import CATALOG, model, row

# --- Converse: the answer's content blocks ---------------------------------------------------


def test_converse_blocks_are_texts_reasoning_and_tool_calls():
    blocks = [
        {"text": "a"},
        {"reasoningContent": {"reasoningText": {"text": "why"}}},
        {"toolUse": {"toolUseId": 1, "name": "get", "input": {"x": 1}}},
        {"text": "b"},
        {"reasoningContent": {}},
        {"image": {}},  # nothing the contract shows
    ]
    texts, reasoning, calls = _answer_parts(blocks, Plan(body={}))
    assert (texts, reasoning) == (["a", "b"], ["why"])
    assert calls == [
        {"id": "1", "type": "function", "function": {"name": "get", "arguments": '{"x":1}'}}
    ]


def test_the_json_tools_input_is_text_only_when_the_plan_asked_for_it():
    block = {"toolUse": {"toolUseId": "t", "name": JSON_TOOL, "input": {"a": 1}}}
    assert _answer_parts([block], Plan(body={}, json_tool=True)) == (['{"a":1}'], [], [])
    texts, _, calls = _answer_parts([block], Plan(body={}))
    assert texts == [] and calls[0]["function"]["name"] == JSON_TOOL


def test_a_block_that_is_not_an_object_is_unreadable():
    with pytest.raises(ValueError, match="a content block is not an object"):
        _answer_parts([{"text": "a"}, "b"], Plan(body={}))


# --- Gemini: flash-image ------------------------------------------------------------------------


def test_the_flash_image_request_asks_for_candidates_only_beyond_one():
    one = flash_image_payload(SimpleNamespace(prompt="a cat", n=1), "16:9")
    assert one == {
        "contents": [{"role": "user", "parts": [{"text": "a cat"}]}],
        "generationConfig": {
            "responseModalities": ["TEXT", "IMAGE"],
            "imageConfig": {"aspectRatio": "16:9"},
        },
    }
    two = flash_image_payload(SimpleNamespace(prompt="a cat", n=2), "1:1")
    assert two["generationConfig"]["candidateCount"] == 2


def _candidate(*parts, finish="STOP"):
    return {"content": {"parts": list(parts)}, "finishReason": finish}


def test_flash_image_parts_leave_out_thoughts_and_stop_at_a_blocked_candidate():
    candidates = [
        "not an object",
        _candidate(
            {"text": "a "}, {"text": "plan", "thought": True}, {"inlineData": {"data": "QQ"}}
        ),
        _candidate({"text": "b"}, "x", {"inlineData": {"data": 3}}),
    ]
    assert _flash_image_parts(candidates) == (["a ", "b"], ["QQ"])
    assert _flash_image_parts([*candidates, _candidate(finish="SAFETY")]) is None


def test_flash_images_are_billed_on_tokens_when_counted_and_sized_by_the_aspect():
    answer = {
        "candidates": [_candidate({"text": " a red car "}, {"inlineData": {"data": "QQ"}})],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1290},
    }
    images = flash_images(answer, "1:1")
    assert (images.flagged, images.size, images.input_tokens, images.output_tokens) == (
        False,
        "1024x1024",
        5,
        1290,
    )
    assert [(i.b64_json, i.revised_prompt) for i in images.images] == [("QQ", "a red car")]
    uncounted = flash_images({"candidates": answer["candidates"]}, "1:1")
    assert (uncounted.input_tokens, uncounted.output_tokens) == (None, None)


@pytest.mark.parametrize(
    "answer",
    [
        {"promptFeedback": {"blockReason": "SAFETY"}, "candidates": []},
        {"candidates": [_candidate(finish="PROHIBITED_CONTENT")]},
        {"candidates": [_candidate({"text": "I cannot draw that"})]},  # no image
        {},
    ],
)
def test_a_blocked_or_imageless_answer_is_flagged(answer):
    images = flash_images(answer, "1:1")
    assert images.flagged and images.images == []


@pytest.mark.parametrize("answer", [[], {"candidates": {"a": 1}}, {"promptFeedback": "x"}])
def test_a_flash_image_answer_of_the_wrong_shape_is_malformed(answer):
    with pytest.raises(ProviderFailure):
        flash_images(answer, "1:1")


# --- the Responses relay: error and final events ------------------------------------------------


def test_an_error_event_is_the_streams_failure_with_its_code_and_param():
    sse, outcome = ResponsesSSE(), StreamOutcome()
    error = {"type": "error", "code": "rate_limit_exceeded", "param": "model", "message": "slow"}
    sse._note_error(orjson.dumps(error), outcome)
    assert (outcome.failure, sse.error_code, sse.error_param) == (
        "slow",
        "rate_limit_exceeded",
        "model",
    )
    sse._note_error(b"not json", outcome)
    assert (sse.error_code, sse.error_param) == ("rate_limit_exceeded", None)
    assert outcome.failure  # the generic provider error


def test_a_final_event_completes_the_stream_with_its_ids_and_usage():
    sse, outcome = ResponsesSSE(), StreamOutcome()
    sse.searches = {"ws_1", "ws_2"}
    usage = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    final = {"response": {"id": "resp_1", "model": "gpt-5", "usage": usage, "output": []}}
    sse._note_final(orjson.dumps(final), outcome)
    assert (outcome.completed, outcome.upstream_id, outcome.response_model) == (
        True,
        "resp_1",
        "gpt-5",
    )
    assert outcome.usage is not None
    assert (outcome.usage.total_tokens, outcome.usage.units) == (7, 2)  # the searches seen


def test_a_final_event_keeps_the_ids_already_known_and_reads_no_usage_it_lacks():
    sse, outcome = ResponsesSSE(), StreamOutcome(upstream_id="resp_0", response_model="m0")
    sse._note_final(orjson.dumps({"response": {"id": "resp_1", "model": "m1"}}), outcome)
    assert (outcome.completed, outcome.upstream_id, outcome.usage) == (True, "resp_0", None)
    for data in (b"[1]", b"{", orjson.dumps({"response": "x"})):
        broken = StreamOutcome()
        sse._note_final(data, broken)
        assert (broken.completed, broken.upstream_id, broken.usage) == (True, "", None)


# --- /v1/responses: what a stateless provider cannot take -------------------------------------

STATELESS = SimpleNamespace(stateful_responses=False, responses_include=None)
STATEFUL = SimpleNamespace(stateful_responses=True, responses_include=None)


def _request(**fields) -> ResponseRequest:
    return ResponseRequest.model_validate({"model": "gpt-5", "input": "hi", **fields})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"previous_response_id": "resp_1"}, STATELESS_MESSAGE),
        ({"conversation": "conv_1"}, CONVERSATION_MESSAGE),
    ],
)
def test_stored_state_needs_a_stateful_provider(fields, message):
    _check_state(STATEFUL, _request(**fields))
    with pytest.raises(BadRequest) as refused:
        _check_state(STATELESS, _request(**fields))
    assert refused.value.message == message


def test_the_inputs_modalities_and_item_references():
    image = {"type": "input_image", "image_url": "https://example.edu/a.png"}
    message = {"role": "user", "content": [{"type": "input_text", "text": "what"}, image]}
    assert _input_modalities(STATELESS, _request(input=[message])) == {"image"}
    assert _input_modalities(STATELESS, _request()) == set()
    reference = _request(input=[{"type": "item_reference", "id": "msg_1"}])
    assert _input_modalities(STATEFUL, reference) == set()
    with pytest.raises(BadRequest) as refused:
        _input_modalities(STATELESS, reference)
    assert refused.value.message == ITEM_REFERENCE_MESSAGE


# --- /v1/images/generations: what the images are billed on ------------------------------------


def _image_route(cost_type):
    entry = model("gpt-image-1", "direct", row("direct", "gpt-image-1"), image=True)
    entry = replace(entry, cost={"type": cost_type})
    provider = CATALOG.providers["direct"]
    return SimpleNamespace(model=entry, provider=provider)


BODY = SimpleNamespace(size="1024x1024", quality="high")


def test_token_priced_images_with_counts_are_billed_on_tokens():
    generated = GeneratedImages(input_tokens=10, output_tokens=4160, size="1024x1536")
    usage, mp = _billed_usage(_image_route("per_token"), BODY, generated, 1)
    assert mp is None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 4160, 4170)
    assert (usage.images, usage.megapixels, usage.size, usage.quality) == (
        1,
        None,
        "1024x1536",
        "high",
    )


@pytest.mark.parametrize(
    ("cost_type", "generated"),
    [
        ("per_token", GeneratedImages(input_tokens=10, output_tokens=None)),  # not counted
        ("per_image", GeneratedImages(input_tokens=10, output_tokens=4160)),
    ],
)
def test_other_images_are_billed_on_megapixels(cost_type, generated):
    usage, mp = _billed_usage(_image_route(cost_type), BODY, generated, 2)
    assert mp == 2.0972
    assert (usage.megapixels, usage.total_tokens, usage.prompt_tokens) == (
        Decimal("2.0972"),
        None,
        None,
    )
    assert (usage.size, usage.images) == ("1024x1024", 2)


def test_an_image_entry():
    assert _entry("QQ", None, 7, "c2pa", flagged=False) == {
        "b64_json": "QQ",
        "revised_prompt": None,
        "seed": 7,
        "watermark": "c2pa",
        "flagged": False,
    }

"""POST /v1/responses takes back every item its answers carry (a stateless conversation goes on
by sending the previous answer's `output` as `input`), `include`, and stays strict.

The fixtures are the public shapes of the Responses API's output items (the openai SDK's
`openai.types.responses` and OpenAI's API reference), each with every documented key."""

from __future__ import annotations

import copy

import openai
import openai.types.responses as responses_types
import pytest
from openai._models import validate_type
from openai.types.responses import response_input_item
from pydantic import BaseModel

from catalog.models import Model
from licensing.models import Transaction
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
AGGREGATOR = {"X-Service-Provider": "aggregator"}
REPLY = "Sunny, 21 degrees."
USER = {"role": "user", "content": "And tomorrow?"}

# pydantic's labels of the unions a 422's `loc` passes through (README, Decisions).
ITEMS = (
    "list[tagged-union[ResponseMessage,ReasoningItem,FunctionCallItem,FunctionCallOutputItem,"
    "CustomToolCallItem,CustomToolCallOutputItem,WebSearchCallItem,ItemReference]]"
)
PARTS = (
    "list[tagged-union[InputText,InputImage,InputFile,ResponseInputAudio,OutputText,OutputRefusal]]"
)
OUTPUT_PARTS = "list[tagged-union[InputText,InputImage,InputFile]]"

TOKEN = {"token": "Sun", "bytes": [83, 117, 110], "logprob": -0.0123}
OUTPUT_TEXT = {
    "type": "output_text",
    "text": "Paris is sunny [1].",
    "annotations": [
        {
            "type": "url_citation",
            "url": "https://weather.example.edu/paris",
            "title": "Paris weather",
            "start_index": 15,
            "end_index": 18,
        },
        {"type": "file_citation", "file_id": "file-abc", "filename": "atlas.pdf", "index": 3},
        {
            "type": "container_file_citation",
            "container_id": "cntr_1",
            "file_id": "cfile_1",
            "filename": "forecast.csv",
            "start_index": 0,
            "end_index": 5,
        },
        {"type": "file_path", "file_id": "file-xyz", "index": 7},
    ],
    "logprobs": [{**TOKEN, "top_logprobs": [TOKEN, {**TOKEN, "token": "Rain", "logprob": -4.5}]}],
}
REFUSAL = {"type": "refusal", "refusal": "I cannot share that."}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "phase": "final_answer",
    "content": [OUTPUT_TEXT, REFUSAL],
}
REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Looking up the forecast."}],
    "content": [{"type": "reasoning_text", "text": "The user wants the weather."}],
    "encrypted_content": "gAAAAABo-opaque-blob==",
    "status": "completed",
}
FUNCTION_CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
    "namespace": None,
    "caller": {"type": "direct"},
    "async": False,
}
FUNCTION_OUTPUT = {
    "id": "fco_1",
    "type": "function_call_output",
    "call_id": "call_1",
    "output": [
        {"type": "input_text", "text": "21 degrees"},
        {
            "type": "input_image",
            "image_url": "https://weather.example.edu/map.png",
            "detail": "low",
        },
    ],
    "status": "completed",
}

# One input per kind of item an answer carries, and the input-only items beside them.
FIXTURES = {
    "message": [MESSAGE],
    "message-minimal": [
        {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "status": "incomplete",
            "content": [{"type": "output_text", "text": "Sun", "annotations": [], "logprobs": []}],
        }
    ],
    "reasoning": [REASONING],
    "reasoning-minimal": [
        {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": None}
    ],
    "function_call": [FUNCTION_CALL],
    "function_call_output-string": [
        {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_2", "output": '{"temp": 21}'},
    ],
    "function_call_output-parts": [FUNCTION_CALL, FUNCTION_OUTPUT],
    "input-message": [
        {
            "type": "message",
            "role": "developer",
            "status": "completed",
            "content": [{"type": "input_text", "text": "Answer briefly."}],
        }
    ],
    "whole-turn": [USER, REASONING, FUNCTION_CALL, FUNCTION_OUTPUT, MESSAGE],
}


def _sdk_extras(value) -> list:
    """Keys the openai SDK's models do not know, anywhere in a parsed item."""
    if isinstance(value, BaseModel):
        extras = list(value.model_extra or ())
        return extras + [
            e for field in type(value).model_fields for e in _sdk_extras(getattr(value, field))
        ]
    if isinstance(value, list):
        return [e for item in value for e in _sdk_extras(item)]
    return []


@pytest.mark.parametrize(
    ("item", "sdk_type"),
    [
        (MESSAGE, responses_types.ResponseOutputMessage),
        (FIXTURES["message-minimal"][0], responses_types.ResponseOutputMessage),
        (REASONING, responses_types.ResponseReasoningItem),
        (FIXTURES["reasoning-minimal"][0], responses_types.ResponseReasoningItem),
        (FUNCTION_CALL, responses_types.ResponseFunctionToolCall),
        (FUNCTION_OUTPUT, response_input_item.FunctionCallOutput),
        (FIXTURES["function_call_output-string"][1], response_input_item.FunctionCallOutput),
        (FIXTURES["input-message"][0], response_input_item.Message),
        ({"type": "item_reference", "id": "msg_0"}, response_input_item.ItemReference),
        (USER, responses_types.EasyInputMessage),
    ],
)
def test_the_fixtures_are_the_sdks_own_shapes(item, sdk_type):
    parsed = validate_type(type_=sdk_type, value=item)
    assert _sdk_extras(parsed) == [] and parsed.to_dict() == item


def respond(client, auth, body, **headers):
    return client.post("/v1/responses", json=body, headers={**auth, **headers})


def assert_answered(response, fake, sent_input, upstream_model):
    """200 with the fake's answer, its ledger row, and the items as the upstream received them."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "response" and body["status"] == "completed"
    texts = [
        part["text"]
        for item in body["output"]
        if item["type"] == "message"
        for part in item["content"]
    ]
    assert texts == [REPLY]
    received = fake.last.json
    assert received["input"] == sent_input and received["model"] == upstream_model
    row = Transaction.objects.get()
    assert (row.service, row.status_code, row.billed_model) == ("responses", 200, MINI)
    assert (row.prompt_tokens, row.completion_tokens) == (
        body["usage"]["input_tokens"],
        body["usage"]["output_tokens"],
    )
    assert row.credits == body["usage"]["credits_used"] > 0
    assert row.upstream_id == body["id"]
    return received


@pytest.fixture
def fakes(catalog):
    for fake in catalog.values():
        fake.reply_text = REPLY
    return catalog


# --- every output item goes back in ----------------------------------------------------------


@pytest.mark.parametrize("kind", FIXTURES)
def test_every_output_item_goes_back_in_to_the_direct_provider(client, auth, fakes, kind):
    items = [*FIXTURES[kind], USER]
    response = respond(client, auth, {"model": MINI, "input": items})
    assert_answered(response, fakes["direct"], items, MINI)


@pytest.mark.parametrize("kind", FIXTURES)
def test_every_output_item_goes_back_in_to_the_aggregator(client, auth, fakes, kind):
    items = [*FIXTURES[kind], USER]
    response = respond(client, auth, {"model": MINI, "input": items}, **AGGREGATOR)
    assert_answered(response, fakes["aggregator"], items, "openai/gpt-4o-mini")
    assert fakes["aggregator"].last.path == "/api/v1/responses"


def test_item_reference_on_the_direct_provider(client, auth, fakes):
    items = [{"type": "item_reference", "id": "msg_0"}, {"id": "rs_0"}, USER]
    response = respond(client, auth, {"model": MINI, "input": items})
    assert_answered(response, fakes["direct"], items, MINI)


def test_item_reference_on_the_stateless_aggregator_is_refused_before_any_call(client, auth, fakes):
    for reference in ({"type": "item_reference", "id": "msg_0"}, {"id": "msg_0"}):
        response = respond(client, auth, {"model": MINI, "input": [reference, USER]}, **AGGREGATOR)
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": "item_reference is not supported by this provider; send the "
                "referenced items in `input`."
            }
        }
    assert fakes["aggregator"].requests == []
    assert refusal_codes() == ["provider_selection", "provider_selection"]


def test_input_file_in_a_function_output_on_a_model_that_reads_files(client, auth, fakes):
    model = Model.objects.get(model_id=MINI)
    model.input_modality = {**model.input_modality, "file": True}
    model.save()
    output = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {
                "type": "input_file",
                "file_url": "https://weather.example.edu/report.pdf",
                "filename": "report.pdf",
                "detail": "high",
            },
            {"type": "input_file", "file_id": "file-abc"},
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBERi0=",
                "filename": "a.pdf",
            },
        ],
    }
    items = [FUNCTION_CALL, output, USER]
    assert_answered(
        respond(client, auth, {"model": MINI, "input": items}), fakes["direct"], items, MINI
    )


# --- the real openai SDK: an answer's output back as input --------------------------------------


def sdk_answer(output: list[dict]) -> dict:
    """A whole Responses answer around `output` (what the fake upstream is told to send)."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "model": "gpt-4o-mini-2024-07-18",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 30,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 12,
            "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": 42,
        },
    }


def send_back(sdk, fake, output) -> None:
    """`output` (the SDK's objects) back as input in every form a program may hold it, each
    received upstream as the API's own items."""
    forms = {
        "objects": (output, [item.to_dict() for item in output]),
        "to_dict": ([item.to_dict() for item in output],) * 2,
        "model_dump": (
            [item.model_dump() for item in output],
            [item.model_dump(by_alias=True) for item in output],
        ),
        "model_dump-json": (
            [item.model_dump(mode="json") for item in output],
            [item.model_dump(mode="json", by_alias=True) for item in output],
        ),
        "model_dump-by_alias": ([item.model_dump(by_alias=True) for item in output],) * 2,
    }
    for name, (items, received) in forms.items():
        follow = sdk.responses.create(model=MINI, input=[*items, USER])
        assert follow.output_text == REPLY, name
        assert fake.last.json["input"] == [*received, USER], name


def test_sdk_sends_the_gateways_own_answer_back(sdk, fakes):
    """The simulator's answer: `output_text` with `annotations` and `logprobs` (issue 21)."""
    first = sdk.responses.create(model=MINI, input="Weather in Paris?")
    part = first.output[0].content[0]
    assert (part.type, part.annotations, part.logprobs) == ("output_text", [], [])
    send_back(sdk, fakes["direct"], first.output)
    assert Transaction.objects.filter(service="responses", status_code=200).count() == 6


def test_sdk_sends_every_kind_of_item_back(sdk, fakes):
    """An answer with reasoning, a function call and a message whose text carries annotations and
    logprobs, and a refusal: every form of the SDK's objects goes back in."""
    output = [REASONING, FUNCTION_CALL, {**MESSAGE, "phase": None}]
    fakes["direct"].fail_next(200, sdk_answer(output))
    first = sdk.responses.create(model=MINI, input="Weather in Paris?")
    assert [item.to_dict() for item in first.output] == output
    message = first.output[2]
    assert message.content[0].annotations[0].url == "https://weather.example.edu/paris"
    assert message.content[0].logprobs[0].top_logprobs[1].token == "Rain"
    assert message.content[1].refusal == "I cannot share that."
    assert first.output[1].async_ is False
    send_back(sdk, fakes["direct"], first.output)
    # Both spellings of `async` at once: the SDK's Python name is then an unknown key.
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        sdk.responses.create(model=MINI, input=[{**FUNCTION_CALL, "async_": True}, USER])
    detail = caught.value.response.json()["detail"]  # the SDK's `body` is the `error` object
    assert [d["loc"] for d in detail if d["type"] == "extra_forbidden"] == [
        [
            "body",
            "input",
            ITEMS,
            0,
            "function_call",
            "async_",
        ]
    ]


def test_sdk_stream_answer_goes_back_in(sdk, fakes):
    with sdk.responses.stream(model=MINI, input="Weather in Paris?") as stream:
        final = stream.get_final_response()
    follow = sdk.responses.create(model=MINI, input=[*final.output, USER])
    assert follow.output_text == REPLY
    # The stream's final answer is the SDK's parsed form: its own `parsed` key stays home.
    message = final.output[0].to_dict()
    assert [part.pop("parsed") for part in message["content"]] == [None]
    assert fakes["direct"].last.json["input"] == [message, USER]


# --- modalities and guardrails see the new items ---------------------------------------------


def test_an_image_in_a_function_output_is_image_input(client, auth, fakes):
    items = [FUNCTION_CALL, FUNCTION_OUTPUT, USER]
    response = respond(client, auth, {"model": "meta-llama/llama-3.1-8b-instruct", "input": items})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "No available provider for model 'meta-llama/llama-3.1-8b-instruct' supports image input"
    )
    file_output = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [{"type": "input_file", "file_id": "file-abc"}],
    }
    response = respond(client, auth, {"model": MINI, "input": [file_output, USER]})
    assert response.json()["error"]["message"] == (
        "No available provider for model 'gpt-4o-mini' supports file input"
    )
    assert fakes["direct"].requests == fakes["aggregator"].requests == []
    assert refusal_codes() == ["provider_selection", "provider_selection"]


@pytest.mark.parametrize(
    "item",
    [
        {**FUNCTION_OUTPUT, "output": [{"type": "input_text", "text": "a Forbidden Fruit"}]},
        {**REASONING, "summary": [{"type": "summary_text", "text": "forbidden fruit"}]},
        {**MESSAGE, "content": [{"type": "refusal", "refusal": "no forbidden fruit"}]},
    ],
)
def test_input_guardrail_reads_the_new_items(client, fakes, make_license, make_key, item):
    license = make_license(name="guarded")
    license.license_type.guardrails = {"input": {"patterns": ["(?i)forbidden fruit"]}}
    license.license_type.save()
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = respond(client, auth, {"model": MINI, "input": [item, USER]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Request blocked by guardrail"
    assert fakes["direct"].requests == [] and refusal_codes() == ["guardrail_blocked"]


# --- include -------------------------------------------------------------------------------------

INCLUDABLE = [
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]
AGGREGATOR_INCLUDABLE = [
    "file_search_call.results",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
]


@pytest.mark.parametrize("include", [[], None, INCLUDABLE])
def test_include_is_forwarded_to_the_direct_provider(client, auth, fakes, include):
    body = {"model": MINI, "input": "hi", "include": include}
    assert respond(client, auth, body).status_code == 200
    assert fakes["direct"].last.json["include"] == include


@pytest.mark.parametrize("include", [[], None, AGGREGATOR_INCLUDABLE])
def test_include_is_forwarded_to_the_aggregator(client, auth, fakes, include):
    body = {"model": MINI, "input": "hi", "include": include}
    assert respond(client, auth, body, **AGGREGATOR).status_code == 200
    assert fakes["aggregator"].last.json["include"] == include


@pytest.mark.parametrize(
    "value",
    ["web_search_call.results", "web_search_call.action.sources", "message.output_text.logprobs"],
)
def test_include_the_aggregator_cannot_honour_is_refused_before_any_call(
    client, auth, fakes, value
):
    body = {"model": MINI, "input": "hi", "include": ["reasoning.encrypted_content", value]}
    response = respond(client, auth, body, **AGGREGATOR)
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": f"include value '{value}' is not supported by this provider"}
    }
    assert fakes["aggregator"].requests == []
    assert refusal_codes() == ["provider_selection"]


def test_sdk_include(sdk, fakes):
    answer = sdk.responses.create(model=MINI, input="hi", include=["reasoning.encrypted_content"])
    assert answer.output_text == REPLY
    assert fakes["direct"].last.json["include"] == ["reasoning.encrypted_content"]


def test_include_in_a_policy(client, fakes, make_license, make_key):
    policy = {
        "version": 1,
        "services": {
            "responses": {"params": {"include": {"allowed": ["reasoning.encrypted_content"]}}}
        },
    }
    auth = {"Authorization": f"Bearer {make_key(make_license(name='inc', policy=policy))}"}
    body = {"model": MINI, "input": "hi", "include": ["message.output_text.logprobs"]}
    response = respond(client, auth, body)
    assert response.status_code == 403
    assert response.json()["error"]["param"] == "include"
    body["include"] = ["reasoning.encrypted_content"]
    assert respond(client, auth, body).status_code == 200


# --- strict: undocumented keys and values stay 422 ------------------------------------------


def _with(path: list, key: str, value, base):
    """`base` with `key: value` set in the object at `path`."""
    body = copy.deepcopy(base)
    target = body
    for step in path:
        target = target[step]
    target[key] = value
    return body


MESSAGE_TEXT = [ITEMS, 0, "message", "content", PARTS, 0, "output_text"]
EXTRA_KEYS = [
    # (the items, where the extra key goes, the `loc` after ["body", "input"])
    ([MESSAGE], [0], [ITEMS, 0, "message", "extra"]),
    ([MESSAGE], [0, "content", 0], [*MESSAGE_TEXT, "extra"]),
    (
        [MESSAGE],
        [0, "content", 0, "annotations", 0],
        [*MESSAGE_TEXT, "annotations", 0, "url_citation", "extra"],
    ),
    (
        [MESSAGE],
        [0, "content", 0, "annotations", 3],
        [*MESSAGE_TEXT, "annotations", 3, "file_path", "extra"],
    ),
    ([MESSAGE], [0, "content", 0, "logprobs", 0], [*MESSAGE_TEXT, "logprobs", 0, "extra"]),
    (
        [MESSAGE],
        [0, "content", 0, "logprobs", 0, "top_logprobs", 0],
        [*MESSAGE_TEXT, "logprobs", 0, "top_logprobs", 0, "extra"],
    ),
    ([MESSAGE], [0, "content", 1], [ITEMS, 0, "message", "content", PARTS, 1, "refusal", "extra"]),
    ([REASONING], [0], [ITEMS, 0, "reasoning", "extra"]),
    ([REASONING], [0, "summary", 0], [ITEMS, 0, "reasoning", "summary", 0, "extra"]),
    ([REASONING], [0, "content", 0], [ITEMS, 0, "reasoning", "content", 0, "extra"]),
    ([FUNCTION_CALL], [0], [ITEMS, 0, "function_call", "extra"]),
    ([FUNCTION_CALL], [0, "caller"], [ITEMS, 0, "function_call", "caller", "direct", "extra"]),
    ([FUNCTION_OUTPUT], [0], [ITEMS, 0, "function_call_output", "extra"]),
    (
        [FUNCTION_OUTPUT],
        [0, "output", 1],
        [ITEMS, 0, "function_call_output", "output", OUTPUT_PARTS, 1, "input_image", "extra"],
    ),
    ([{"type": "item_reference", "id": "m"}], [0], [ITEMS, 0, "item_reference", "extra"]),
]


@pytest.mark.parametrize(("items", "path", "loc"), EXTRA_KEYS)
def test_an_undocumented_key_in_any_item_is_422(client, auth, fakes, items, path, loc):
    body = {"model": MINI, "input": _with(path, "extra", 1, items)}
    response = respond(client, auth, body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [(d["type"], d["loc"]) for d in detail if d["type"] == "extra_forbidden"] == [
        ("extra_forbidden", ["body", "input", *loc])
    ]
    assert fakes["direct"].requests == []


@pytest.mark.parametrize(
    ("body", "type_", "loc"),
    [
        ({"include": ["message.logprobs"]}, "literal_error", ["include", 0]),
        ({"include": "reasoning.encrypted_content"}, "list_type", ["include"]),
        (
            {"input": [{**MESSAGE, "status": "done"}]},
            "literal_error",
            ["input", ITEMS, 0, "message", "status"],
        ),
        (
            {"input": _with([0, "content", 0, "annotations", 0], "type", "web", [MESSAGE])},
            "union_tag_invalid",
            ["input", *MESSAGE_TEXT, "annotations", 0],
        ),
        (
            {"input": [{**REASONING, "summary": None}]},
            "list_type",
            ["input", ITEMS, 0, "reasoning", "summary"],
        ),
        (
            {"input": [{"id": "rs_1", "type": "reasoning"}]},
            "missing",
            ["input", ITEMS, 0, "reasoning", "summary"],
        ),
        (
            {"input": [{**FUNCTION_OUTPUT, "output": [{"type": "refusal", "refusal": "x"}]}]},
            "union_tag_invalid",
            ["input", ITEMS, 0, "function_call_output", "output", OUTPUT_PARTS, 0],
        ),
        (  # hostile values: beyond int64, beyond a byte
            {"input": _with([0, "content", 0, "annotations", 0], "end_index", 2**64, [MESSAGE])},
            "less_than_equal",
            ["input", *MESSAGE_TEXT, "annotations", 0, "url_citation", "end_index"],
        ),
        (
            {"input": _with([0, "content", 0, "logprobs", 0], "bytes", [256], [MESSAGE])},
            "less_than_equal",
            ["input", *MESSAGE_TEXT, "logprobs", 0, "bytes", 0],
        ),
    ],
)
def test_undocumented_values_are_422(client, auth, fakes, body, type_, loc):
    response = respond(client, auth, {"model": MINI, "input": "hi", **body})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert ["body", *loc] in [d["loc"] for d in detail if d["type"] == type_], detail
    assert fakes["direct"].requests == []


# --- the whole public reference, and what Codex sends (issue 35) ----------------------------

NAMESPACE_TOOL = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close an agent.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        }
    ],
}
WEB_SEARCH_TOOL = {"type": "web_search", "external_web_access": False}
CODEX_BODY = {
    "model": MINI,
    "instructions": "You are a coding agent.",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ],
    "tools": [
        {
            "type": "function",
            "name": "exec_command",
            "description": "Runs a command.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
        NAMESPACE_TOOL,
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
        },
        {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}},
        {**WEB_SEARCH_TOOL, "search_content_types": ["text", "image"]},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "01a21ded-1505-7ea3-b274-8a90e8fc263d",
    "client_metadata": {"thread_id": "01a21ded", "x-codex-window-id": "01a21ded:0"},
    "text": {"verbosity": "low"},
}
EVERY_OTHER_FIELD = {
    "max_tool_calls": 4,
    "top_logprobs": 2,
    "safety_identifier": "hashed-user",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "explicit", "ttl": "12h", "prewarm": False},
    "service_tier": "flex",
    "background": False,
    "background_options": {"completion_window": "2h"},
    "context_management": [{"type": "compaction", "compact_threshold": 200000}],
    "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}},
    "image": {"context_compression": "auto"},
    "access_programs": {"cyber": "standard"},
    "prompt": {"id": "pmpt_1", "version": "2", "variables": {"city": "Paris"}},
    "stream_options": {"include_obfuscation": False},
    "truncation": "auto",
}


def test_codex_request_is_forwarded_to_the_direct_provider_as_sent(client, auth, fakes):
    response = respond(client, auth, CODEX_BODY)
    assert response.status_code == 200, response.text
    sent = fakes["direct"].last.json
    assert sent == CODEX_BODY


@pytest.mark.parametrize("reasoning", [{}, {"summary": "auto"}, {"generate_summary": "concise"}])
def test_reasoning_without_an_effort(client, auth, fakes, reasoning):
    response = respond(client, auth, {"model": MINI, "input": "hi", "reasoning": reasoning})
    assert response.status_code == 200, response.text
    assert fakes["direct"].last.json["reasoning"] == reasoning


def test_every_field_of_the_reference_is_forwarded_to_the_direct_provider(client, auth, fakes):
    body = {"model": MINI, "input": "hi", **EVERY_OTHER_FIELD}
    assert respond(client, auth, body).status_code == 200
    sent = fakes["direct"].last.json
    assert {key: sent[key] for key in EVERY_OTHER_FIELD} == EVERY_OTHER_FIELD


def test_codex_items_go_back_in(client, auth, fakes):
    """A later Codex turn sends the hosted search's call and its custom tool's call back."""
    items = [
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {
                "type": "search",
                "query": "weather paris",
                "sources": [{"type": "url", "url": "https://example.edu"}],
            },
        },
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** x"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "close_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c2", "output": "closed"},
        USER,
    ]
    body = {"model": MINI, "input": items, "tools": [NAMESPACE_TOOL]}
    assert respond(client, auth, body).status_code == 200
    assert fakes["direct"].last.json["input"] == items


def test_the_hosted_web_search_needs_the_web_search_service(client, fakes, make_license, make_key):
    policy = {"version": 1, "services": {"responses": {}}}
    auth = {"Authorization": f"Bearer {make_key(make_license(name='nosearch', policy=policy))}"}
    body = {"model": MINI, "input": "hi", "tools": [NAMESPACE_TOOL, WEB_SEARCH_TOOL]}
    response = respond(client, auth, body)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "tools[1]: the hosted 'web_search' tool needs the web_search service, "
            "which this license does not enable; leave it out of `tools` (Codex CLI: "
            'web_search = "disabled" in config.toml)'
        }
    }
    assert fakes["direct"].requests == []
    assert refusal_codes() == ["provider_selection"]
    body["tools"] = [NAMESPACE_TOOL]
    assert respond(client, auth, body).status_code == 200


def test_the_hosted_web_search_through_a_chat_only_provider_is_refused(client, auth, fakes):
    body = {"model": MINI, "input": "hi", "tools": [WEB_SEARCH_TOOL], "conversation": "conv_1"}
    response = respond(client, auth, body, **AGGREGATOR)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "conversation is not supported by this provider; send the full conversation in `input`."
    )
    assert fakes["aggregator"].requests == []

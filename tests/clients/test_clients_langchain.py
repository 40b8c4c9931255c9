"""LangChain's OpenAI integration (`langchain-openai`, the `clients` extra) against the live
gateway and the OpenAI simulator: `ChatOpenAI` with `bind_tools` (the call, its parsed
arguments, the `ToolMessage` turn), `with_structured_output` by JSON schema and by function
calling, streamed and not, and `OpenAIEmbeddings` with the settings the spec's float-only
encoding needs."""

from __future__ import annotations

import openai
import pytest

# The `clients` extra: a `.[dev]` environment skips this module instead of failing to collect.
pytest.importorskip("langchain_openai")

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel

from tests.client_helpers import assert_charged, provider_calls, valid_weather_args, weather_report

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"


@pytest.fixture(autouse=True)
def no_tracing(monkeypatch):
    """LangSmith tracing stays off whatever the environment says: nothing leaves 127.0.0.1."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(name, "false")


@pytest.fixture
def llm(gateway, api_key):
    return ChatOpenAI(model=MINI, base_url=gateway.url + "/v1", api_key=api_key, max_retries=0)


@tool
def get_weather(city: str) -> str:
    """The weather in a city now."""
    return weather_report(city)


class Forecast(BaseModel):
    city: str
    temperature_c: int
    sunny: bool


def test_bind_tools_call_then_tool_message_turn(llm, catalog):
    with_tools = llm.bind_tools([get_weather])
    question = [HumanMessage("What is the weather in Paris?")]
    asked = with_tools.invoke(question)
    (call,) = asked.tool_calls
    assert call["name"] == "get_weather"
    city = valid_weather_args(call["args"])["city"]

    result = get_weather.invoke(call["args"])
    answer = with_tools.invoke(
        question + [asked, ToolMessage(content=result, tool_call_id=call["id"])]
    )
    assert not answer.tool_calls and isinstance(answer.content, str) and answer.content
    assert city in answer.content or result in answer.content

    sent = provider_calls(catalog["direct"], "/v1/chat/completions")
    assert sent[0]["tools"][0]["function"]["name"] == "get_weather"
    assert sent[1]["messages"][-1] == {
        "role": "tool",
        "content": result,
        "tool_call_id": call["id"],
    }
    answer_ids = [asked.response_metadata["id"], answer.response_metadata["id"]]
    assert_charged(2, "chat_completions", answer_ids=answer_ids, model=MINI)


def test_bind_tools_streamed(llm, catalog):
    chunks = list(llm.bind_tools([get_weather]).stream("What is the weather in Oslo?"))
    message = chunks[0]
    for chunk in chunks[1:]:
        message = message + chunk
    (call,) = message.tool_calls
    assert call["name"] == "get_weather"
    valid_weather_args(call["args"])
    assert len(chunks) > 2  # the arguments arrived in pieces
    (sent,) = provider_calls(catalog["direct"], "/v1/chat/completions")
    assert sent["stream"] is True
    assert_charged(1, "chat_completions", model=MINI)


# langchain-openai streams a schema's answer through the openai SDK's parsing stream, whose
# chunks it serializes with `parsed` set where the chunk type says None: pydantic warns.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(llm, catalog, method, stream):
    structured = llm.with_structured_output(Forecast, method=method)
    question = "The weather in Rome, please."
    result = list(structured.stream(question))[-1] if stream else structured.invoke(question)
    assert isinstance(result, Forecast)

    (sent,) = provider_calls(catalog["direct"], "/v1/chat/completions")
    if method == "json_schema":
        assert sent["response_format"]["type"] == "json_schema"
    else:
        assert sent["tools"][0]["function"]["name"] == "Forecast"
    assert sent.get("stream", False) is stream
    assert_charged(1, "chat_completions", model=MINI)


def test_embeddings_need_float_encoding(gateway, api_key, catalog):
    settings = dict(
        model="text-embedding-3-small",
        base_url=gateway.url + "/v1",
        api_key=api_key,
        max_retries=0,
        # Raw text, not tiktoken token arrays (the spec refuses token-array input; tiktoken
        # would also fetch its encoding from the network).
        check_embedding_ctx_length=False,
    )
    # The openai SDK under it asks for base64 unless told; the spec accepts float only.
    with pytest.raises(openai.UnprocessableEntityError, match="encoding_format"):
        OpenAIEmbeddings(**settings).embed_query("hello")

    embeddings = OpenAIEmbeddings(**settings, model_kwargs={"encoding_format": "float"})
    vectors = embeddings.embed_documents(["photosynthesis", "the water cycle"])
    query = embeddings.embed_query("plants")
    assert [len(v) for v in vectors + [query]] == [1536] * 3
    assert all(isinstance(x, float) for x in query)
    sent = provider_calls(catalog["direct"], "/v1/embeddings")
    assert [body["input"] for body in sent] == [["photosynthesis", "the water cycle"], ["plants"]]
    assert all(body["encoding_format"] == "float" for body in sent)
    assert_charged(2, "embeddings", model="text-embedding-3-small")

"""Tests of the fake upstream providers, over real HTTP on 127.0.0.1.

Plain pytest, no Django and no database: run with
``.venv/bin/python -m pytest tests/providers/test_fake_upstreams.py -q -p no:django``.
"""

from __future__ import annotations

import base64
import json
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import botocore.session
import httpx
import openai
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from fake_upstreams import (
    BedrockFake,
    FakeServer,
    GeminiFake,
    OpenAIFake,
    OpenRouterFake,
    serve,
)
from fake_upstreams.png import make_png, read_png
from tests.kit import FAKE_OPENAI_KEY

OPENAI_KEY = FAKE_OPENAI_KEY
OPENROUTER_KEY = "sk-or-v1-test"
GEMINI_KEY = "AIza-test-key"
AWS_ACCESS = "AKIAFAKEFAKEFAKE"
AWS_SECRET = "fake/secret/key/for/tests"
AWS_REGION = "eu-central-1"
ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def openrouter_server():
    with serve(OpenRouterFake(api_key=OPENROUTER_KEY)) as fake:
        yield fake


@pytest.fixture(scope="module")
def bedrock_server():
    with serve(
        BedrockFake(access_key=AWS_ACCESS, secret_key=AWS_SECRET, region=AWS_REGION)
    ) as fake:
        yield fake


@pytest.fixture(scope="module")
def gemini_server():
    with serve(GeminiFake(api_key=GEMINI_KEY)) as fake:
        yield fake


# Each test gets the module's server with knobs, state and recordings reset (`oai`, the fake
# OpenAI, with `oai_http` and `oai_sdk`, comes from the kit, tests/kit.py).
@pytest.fixture
def orouter(openrouter_server):
    openrouter_server.reset()
    return openrouter_server


@pytest.fixture
def bedrock(bedrock_server):
    bedrock_server.reset()
    return bedrock_server


@pytest.fixture
def gemini(gemini_server):
    gemini_server.reset()
    return gemini_server


@pytest.fixture
def sdk(oai_sdk):
    """The openai SDK against the fake itself (not the gateway's `sdk` of the kit)."""
    return oai_sdk


def sse_events(text: str) -> list[dict]:
    """Split an SSE body into events ({"event", "data"}), insisting on blank-line framing."""
    assert text.endswith("\n\n"), "an SSE body ends with a blank line"
    events = []
    for block in text.split("\n\n")[:-1]:
        event = {"event": None, "data": None, "comments": []}
        for line in block.split("\n"):
            if line.startswith(":"):
                event["comments"].append(line[1:].strip())
            elif line.startswith("event: "):
                event["event"] = line[len("event: ") :]
            elif line.startswith("data: "):
                event["data"] = line[len("data: ") :]
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        events.append(event)
    return events


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """Independent PNG check: signature, IHDR, CRCs, IDAT inflates to the right size."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        if kind == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, color, interlace) == (8, 2, 0)
            size = (width, height)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert kind == b"IEND" and size is not None
    pixels = zlib.decompress(idat)
    assert len(pixels) == size[1] * (1 + 3 * size[0])
    return size[0], size[1], pixels


# --------------------------------------------------------------------------- runner and base class


def test_serve_starts_and_stops_cleanly():
    before = threading.active_count()
    with serve(OpenAIFake()) as fake:
        assert fake.base_url == fake.origin + "/v1"
        assert fake.origin.startswith("http://127.0.0.1:")
        assert httpx.post(fake.base_url + "/embeddings", json={}).status_code == 400
        origin = fake.origin
    with pytest.raises(httpx.ConnectError):
        httpx.get(origin + "/v1/models", timeout=1)
    assert threading.active_count() == before


def test_fake_server_object_for_session_fixtures():
    server = FakeServer(GeminiFake())
    fake = server.start()
    try:
        assert server.base_url == fake.base_url == f"http://127.0.0.1:{server.port}/v1beta"
    finally:
        server.stop()
    server.stop()  # idempotent


def test_records_requests(oai_http, oai):
    oai_http.post(
        "/embeddings?trace=1",
        json={"model": "text-embedding-3-small", "input": "hi"},
        headers={"X-Custom": "Yes"},
    )
    request = oai.last
    assert request.method == "POST"
    assert request.path == "/v1/embeddings"
    assert request.query == {"trace": "1"}
    assert request.headers["x-custom"] == "Yes"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert (
        json.loads(request.body)
        == request.json
        == {"model": "text-embedding-3-small", "input": "hi"}
    )
    assert oai.requests == [request]
    oai.clear()
    assert oai.requests == [] and oai.last is None


def test_fail_next_uses_protocol_error_shape_then_recovers(oai_http, oai):
    oai.fail_next(503, times=2)
    body = {"model": "text-embedding-3-small", "input": "x"}
    for _ in range(2):
        failed = oai_http.post("/embeddings", json=body)
        assert failed.status_code == 503
        assert set(failed.json()["error"]) == {"message", "type", "param", "code"}
    assert oai_http.post("/embeddings", json=body).status_code == 200
    assert len(oai.requests) == 3  # failed attempts are recorded too


def test_fail_next_custom_body_and_headers(oai_http, oai):
    oai.fail_next(429, body={"error": {"message": "slow down"}}, headers={"retry-after": "7"})
    answer = oai_http.post("/embeddings", json={})
    assert answer.status_code == 429
    assert answer.json() == {"error": {"message": "slow down"}}
    assert answer.headers["retry-after"] == "7"


def test_hang_next_makes_client_time_out(oai_http, oai):
    oai.hang_next(seconds=3)
    body = {"model": "text-embedding-3-small", "input": "x"}
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        oai_http.post("/embeddings", json=body, timeout=0.3)
    assert time.monotonic() - started < 2
    assert oai_http.post("/embeddings", json=body).status_code == 200


def test_drop_next_is_a_transport_error(oai_http, oai):
    oai.drop_next()
    with pytest.raises(httpx.TransportError) as caught:
        oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
    assert isinstance(caught.value, httpx.RemoteProtocolError | httpx.ReadError)
    assert oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": "x"})


def test_failure_modes_share_one_queue(oai_http, oai):
    oai.fail_next(500)
    oai.drop_next()
    body = {"model": "text-embedding-3-small", "input": "x"}
    assert oai_http.post("/embeddings", json=body).status_code == 500
    with pytest.raises(httpx.TransportError):
        oai_http.post("/embeddings", json=body)
    assert oai_http.post("/embeddings", json=body).status_code == 200


def test_delay_and_reset(oai_http, oai):
    oai.delay = 0.25
    started = time.monotonic()
    oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
    assert time.monotonic() - started >= 0.25
    oai.fail_next(500)
    oai.reset()
    assert oai.delay == 0.0 and oai.requests == []
    assert oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": "x"})


def test_concurrent_requests_are_all_recorded(oai, oai_http):
    def call(i):
        oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": f"t{i}"})

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.json["input"] for r in oai.requests) == sorted(f"t{i}" for i in range(8))


def test_png_helpers_make_decodable_images():
    data = make_png(12, 7, seed="x")
    assert decode_png(data)[:2] == (12, 7)
    assert read_png(data)["width"] == 12
    assert make_png(4, 4, seed="a") == make_png(4, 4, seed="a") != make_png(4, 4, seed="b")
    with pytest.raises(ValueError):
        read_png(data[:-5] + b"XXXXX")


def test_cli_prints_a_labelled_line_and_stops_on_ctrl_c():
    process = subprocess.Popen(
        [sys.executable, "-m", "fake_upstreams", "openai", "--port", "0", "--api-key", "k"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "simulator" in line.lower() and "not a real provider" in line
        base_url = line.split(" at ")[1].split()[0]
        assert base_url.endswith("/v1")
        answer = httpx.post(
            base_url + "/embeddings",
            json={"model": "text-embedding-3-small", "input": "x"},
            headers={"Authorization": "Bearer k"},
        )
        assert answer.status_code == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()


# --------------------------------------------------------------------------- OpenAI


def test_openai_auth(oai):
    url = oai.base_url + "/embeddings"
    body = {"model": "text-embedding-3-small", "input": "x"}
    missing = httpx.post(url, json=body)
    assert missing.status_code == 401
    assert "You didn't provide an API key" in missing.json()["error"]["message"]
    wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-wrong-key-123"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert "sk-wrong-key-123" not in wrong.json()["error"]["message"]  # masked like the real one


def test_openai_embeddings(oai_http, oai):
    answer = oai_http.post(
        "/embeddings", json={"model": "text-embedding-3-large", "input": ["one two", "three"]}
    ).json()
    assert answer["object"] == "list" and answer["model"] == "text-embedding-3-large"
    assert [d["index"] for d in answer["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 3072 for d in answer["data"])
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    again = oai_http.post("/embeddings", json={"model": "text-embedding-3-large", "input": "three"})
    assert again.json()["data"][0]["embedding"] == answer["data"][1]["embedding"]

    ada = oai_http.post(
        "/embeddings", json={"model": "text-embedding-ada-002", "input": "x"}
    ).json()
    assert ada["model"] == "text-embedding-ada-002-v2" and len(ada["data"][0]["embedding"]) == 1536

    tokens = oai_http.post(
        "/embeddings", json={"model": "text-embedding-3-small", "input": [[1, 2, 3], [4]]}
    ).json()
    assert tokens["usage"]["prompt_tokens"] == 4 and len(tokens["data"]) == 2


def test_openai_embeddings_dimensions_base64_and_order(oai_http, oai):
    body = {"model": "text-embedding-3-small", "input": ["a", "b", "c"], "dimensions": 64}
    floats = oai_http.post("/embeddings", json=body).json()["data"]
    assert all(len(d["embedding"]) == 64 for d in floats)
    assert abs(sum(v * v for v in floats[0]["embedding"]) - 1) < 1e-5  # re-normalised
    packed = oai_http.post("/embeddings", json={**body, "encoding_format": "base64"}).json()["data"]
    decoded = struct.unpack("<64f", base64.b64decode(packed[0]["embedding"]))
    assert decoded == pytest.approx(floats[0]["embedding"], abs=1e-6)

    oai.reverse_embeddings = True
    reversed_data = oai_http.post("/embeddings", json=body).json()["data"]
    assert [d["index"] for d in reversed_data] == [2, 1, 0]
    assert reversed_data[0]["embedding"] == floats[2]["embedding"]

    ada = oai_http.post(
        "/embeddings", json={"model": "text-embedding-ada-002", "input": "x", "dimensions": 8}
    )
    assert ada.status_code == 400
    assert ada.json()["error"]["message"] == "This model does not support specifying dimensions."


def test_openai_embeddings_errors(oai_http):
    unknown = oai_http.post("/embeddings", json={"model": "nope", "input": "x"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert unknown.json()["error"]["message"] == (
        "The model `nope` does not exist or you do not have access to it."
    )
    # The spec says the provider answers an empty string with 0 prompt tokens.
    empty = oai_http.post("/embeddings", json={"model": "text-embedding-3-small", "input": ""})
    assert empty.status_code == 200
    assert empty.json()["usage"]["prompt_tokens"] == 0
    garbage = oai_http.post("/embeddings", content=b"{not json")
    assert garbage.status_code == 400
    assert "could not parse the JSON body" in garbage.json()["error"]["message"]
    assert oai_http.post("/nowhere", json={}).json()["error"]["message"] == (
        "Invalid URL (POST /v1/nowhere)"
    )


CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello big world"}]}


def test_openai_chat_completion(oai_http, oai):
    answer = oai_http.post("/chat/completions", json=CHAT).json()
    assert answer["id"].startswith("chatcmpl-") and answer["object"] == "chat.completion"
    assert answer["model"] == "gpt-4o-mini-2024-07-18"
    choice = answer["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": "Echo: hello big world",
        "refusal": None,
        "annotations": [],
    }
    assert choice["finish_reason"] == "stop" and choice["logprobs"] is None
    usage = answer["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (3, 4, 7)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0

    oai.reply_text = "one two three four five"
    short = oai_http.post("/chat/completions", json={**CHAT, "max_completion_tokens": 2}).json()
    assert short["choices"][0]["message"]["content"] == "one two"
    assert short["choices"][0]["finish_reason"] == "length"

    missing = oai_http.post("/chat/completions", json={**CHAT, "model": "gpt-9"})
    assert missing.status_code == 404
    assert missing.json()["error"]["message"].startswith("The model `gpt-9` does not exist")


def test_openai_chat_stream_framing(oai_http, oai):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    answer = oai_http.post("/chat/completions", json=body)
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = sse_events(answer.text)
    assert events[-1]["data"] == "[DONE]"
    chunks = [json.loads(e["data"]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Echo: hello big world"
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) > 1
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 7

    plain = sse_events(oai_http.post("/chat/completions", json={**CHAT, "stream": True}).text)
    assert all("usage" not in json.loads(e["data"]) for e in plain[:-1])


def test_openai_stream_breaks_mid_way(oai_http, oai):
    oai.stream_fail_after = 2
    received = []
    with pytest.raises(httpx.TransportError):
        with oai_http.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as answer:
            assert answer.status_code == 200
            for line in answer.iter_lines():
                if line:
                    received.append(line)
    assert len(received) == 2

    oai.stream_fail_mode = "error_event"
    events = sse_events(oai_http.post("/chat/completions", json={**CHAT, "stream": True}).text)
    assert len(events) == 3 and json.loads(events[-1]["data"])["error"]["type"] == "server_error"


def test_openai_stream_stall_and_chunk_delay(oai_http, oai):
    oai.stream_stall_after = 1
    oai.stream_stall_seconds = 3
    received = []
    with pytest.raises(httpx.ReadTimeout):
        with oai_http.stream(
            "POST", "/chat/completions", json={**CHAT, "stream": True}, timeout=0.4
        ) as answer:
            for line in answer.iter_lines():
                if line:
                    received.append(line)
    assert len(received) == 1

    oai.reset()
    oai.chunk_delay = 0.05
    started = time.monotonic()
    events = sse_events(oai_http.post("/chat/completions", json={**CHAT, "stream": True}).text)
    assert time.monotonic() - started >= 0.05 * (len(events) - 1)


def test_openai_responses(oai_http, oai):
    first = oai_http.post(
        "/responses",
        json={"model": "gpt-4.1-mini", "input": "tell me things", "instructions": "Be brief"},
    ).json()
    assert first["id"].startswith("resp_") and first["object"] == "response"
    assert first["status"] == "completed"
    message = first["output"][0]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["text"] == "Echo: tell me things"
    assert message["content"][0]["annotations"] == []
    assert first["usage"]["input_tokens"] == 5  # instructions count as input
    assert first["usage"]["output_tokens"] == 4
    assert first["usage"]["input_tokens_details"]["cached_tokens"] == 0

    follow = oai_http.post(
        "/responses",
        json={"model": "gpt-4.1-mini", "input": "more", "previous_response_id": first["id"]},
    ).json()
    assert follow["previous_response_id"] == first["id"]
    assert follow["usage"]["input_tokens"] == 5 + 4 + 1  # history is billed as input
    assert oai_http.get(f"/responses/{follow['id']}").json()["id"] == follow["id"]

    lost = oai_http.post(
        "/responses", json={"model": "gpt-4.1-mini", "input": "x", "previous_response_id": "resp_x"}
    )
    assert lost.status_code == 404
    assert lost.json()["error"]["message"] == "Previous response with id 'resp_x' not found."


def test_openai_responses_stream_events(oai_http):
    answer = oai_http.post(
        "/responses", json={"model": "gpt-4.1-mini", "input": "a b c d e f", "stream": True}
    )
    events = sse_events(answer.text)
    names = [e["event"] for e in events]
    datas = [json.loads(e["data"]) for e in events]
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [d["delta"] for d in datas if d["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "Echo: a b c d e f"
    assert [d["type"] for d in datas] == names
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert datas[0]["response"]["status"] == "in_progress"
    assert datas[-1]["response"]["usage"]["total_tokens"] == 6 + 7
    assert all(e["data"] != "[DONE]" for e in events)


def test_openai_images_gpt_image(oai_http):
    answer = oai_http.post(
        "/images/generations",
        json={
            "model": "gpt-image-1",
            "prompt": "a red fox",
            "n": 2,
            "size": "1536x1024",
            "quality": "low",
            "output_format": "webp",
        },
    ).json()
    assert answer["output_format"] == "webp" and answer["quality"] == "low"
    assert answer["size"] == "1536x1024" and answer["background"] == "opaque"
    assert len(answer["data"]) == 2
    width, height, _ = decode_png(base64.b64decode(answer["data"][0]["b64_json"]))
    assert width > height
    usage = answer["usage"]
    assert usage["input_tokens"] == 3 and usage["input_tokens_details"]["text_tokens"] == 3
    assert usage["output_tokens"] == 2 * 408
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_openai_images_dalle_urls_and_refusal(oai_http, oai):
    answer = oai_http.post(
        "/images/generations", json={"model": "dall-e-3", "prompt": "a lighthouse"}
    ).json()
    item = answer["data"][0]
    assert item["revised_prompt"] and item["url"].startswith(oai.origin + "/files/")
    image = httpx.get(item["url"])  # no credentials, like a pre-signed URL
    assert image.headers["content-type"] == "image/png"
    decode_png(image.content)

    refused = oai_http.post(
        "/images/generations", json={"model": "gpt-image-1", "prompt": "something forbidden"}
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "moderation_blocked" and error["type"] == "image_generation_user_error"
    assert error["message"].startswith(
        "Your request was rejected as a result of our safety system."
    )
    assert error["param"] is None


def test_openai_sdk_parses_chat_and_stream(sdk):
    completion = sdk.chat.completions.create(**CHAT)
    assert completion.choices[0].message.content == "Echo: hello big world"
    assert completion.usage.total_tokens == 7

    stream = sdk.chat.completions.create(
        **CHAT, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello big world"
    )
    assert chunks[-1].usage.completion_tokens == 4


def test_openai_sdk_parses_responses(sdk):
    response = sdk.responses.create(model="gpt-4.1-mini", input="hi there")
    assert response.output_text == "Echo: hi there"
    assert response.usage.input_tokens == 2

    events = list(sdk.responses.create(model="gpt-4.1-mini", input="hi there", stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Echo: hi there"

    with sdk.responses.stream(model="gpt-4.1-mini", input="hi again") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Echo: hi again"
    assert final.usage.output_tokens == 3


def test_openai_sdk_parses_embeddings(sdk, oai):
    # The SDK asks for base64 by default and decodes it itself.
    result = sdk.embeddings.create(model="text-embedding-3-small", input=["x y", "z"])
    assert oai.last.json["encoding_format"] == "base64"
    assert [len(d.embedding) for d in result.data] == [1536, 1536]
    assert result.usage.prompt_tokens == 3
    plain = sdk.embeddings.create(
        model="text-embedding-3-small", input="z", encoding_format="float"
    )
    assert plain.data[0].embedding == pytest.approx(result.data[1].embedding, abs=1e-6)


# --------------------------------------------------------------------------- OpenRouter


def test_openrouter_chat_and_errors(orouter):
    headers = {"Authorization": f"Bearer {OPENROUTER_KEY}"}
    url = orouter.base_url + "/chat/completions"
    assert orouter.base_url.endswith("/api/v1")
    answer = httpx.post(url, json={**CHAT, "model": "openai/gpt-4o-mini"}, headers=headers).json()
    assert answer["id"].startswith("gen-") and answer["model"] == "openai/gpt-4o-mini"
    assert answer["provider"] == "OpenAI"
    assert answer["choices"][0]["message"]["content"] == "Echo: hello big world"
    assert "cost" not in answer["usage"] and answer["usage"]["total_tokens"] == 7

    unknown = httpx.post(url, json={**CHAT, "model": "acme/nothing"}, headers=headers)
    assert unknown.status_code == 400
    assert unknown.json() == {
        "error": {"message": "acme/nothing is not a valid model ID", "code": 400}
    }
    anonymous = httpx.post(url, json={**CHAT, "model": "openai/gpt-4o-mini"})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == 401
    # The Responses API (beta) is stateless.
    stateless = httpx.post(
        orouter.base_url + "/responses",
        json={"model": "openai/gpt-4o-mini", "input": "hi", "previous_response_id": "resp_1"},
        headers=headers,
    )
    assert stateless.status_code == 400
    answer = httpx.post(
        orouter.base_url + "/responses",
        json={"model": "openai/gpt-4o-mini", "input": "hi there"},
        headers=headers,
    )
    assert answer.json()["output"][0]["content"][0]["text"] == "Echo: hi there"


def test_openrouter_stream_and_embeddings(orouter):
    client = openai.OpenAI(api_key=OPENROUTER_KEY, base_url=orouter.base_url, max_retries=0)
    raw = httpx.post(
        orouter.base_url + "/chat/completions",
        json={**CHAT, "model": "openai/gpt-4o-mini", "stream": True},
        headers={"Authorization": f"Bearer {OPENROUTER_KEY}"},
    ).text
    events = sse_events(raw)
    assert events[0]["comments"] == ["OPENROUTER PROCESSING"]
    assert events[-1]["data"] == "[DONE]" and json.loads(events[-2]["data"])["usage"]
    chunks = list(
        client.chat.completions.create(**{**CHAT, "model": "openai/gpt-4o-mini"}, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello big world"
    )

    embedded = client.embeddings.create(model="openai/text-embedding-3-small", input=["a", "b"])
    assert [len(d.embedding) for d in embedded.data] == [1536, 1536]
    assert embedded.model == "openai/text-embedding-3-small"

    orouter.stream_fail_after = 2
    orouter.stream_fail_mode = "error_event"
    broken = sse_events(
        httpx.post(
            orouter.base_url + "/chat/completions",
            json={**CHAT, "model": "openai/gpt-4o-mini", "stream": True},
            headers={"Authorization": f"Bearer {OPENROUTER_KEY}"},
        ).text
    )
    last = json.loads(broken[-1]["data"])
    assert (
        last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == "server_error"
    )


# --------------------------------------------------------------------------- Bedrock


def signed(fake, model_id: str, body: dict | bytes, secret: str = AWS_SECRET, region=AWS_REGION):
    """Sign like a gateway would (botocore SigV4 over an encoded model id), return request parts."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    url = f"{fake.origin}/model/{model_id.replace(':', '%3A')}/invoke"
    request = AWSRequest(
        method="POST",
        url=url,
        data=data,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    SigV4Auth(Credentials(AWS_ACCESS, secret), "bedrock", region).add_auth(request)
    return url, dict(request.headers.items()), data


@pytest.fixture(scope="module")
def bedrock_client(bedrock_server):
    session = botocore.session.get_session()
    return session.create_client(
        "bedrock-runtime",
        region_name=AWS_REGION,
        endpoint_url=bedrock_server.origin,
        aws_access_key_id=AWS_ACCESS,
        aws_secret_access_key=AWS_SECRET,
        config=Config(retries={"total_max_attempts": 1}),
    )


TITAN_IMAGE = {
    "taskType": "TEXT_IMAGE",
    "textToImageParams": {"text": "a calm lake"},
    "imageGenerationConfig": {
        "numberOfImages": 2,
        "height": 512,
        "width": 1024,
        "quality": "standard",
    },
}


def test_bedrock_accepts_botocore_signature(bedrock):
    url, headers, data = signed(bedrock, "amazon.titan-image-generator-v2:0", TITAN_IMAGE)
    answer = httpx.post(url, content=data, headers=headers)
    assert answer.status_code == 200, answer.text
    assert bedrock.last_signature_valid is True
    assert bedrock.last.raw_path.endswith("amazon.titan-image-generator-v2%3A0/invoke")
    body = answer.json()
    assert body["error"] is None and len(body["images"]) == 2
    width, height, _ = decode_png(base64.b64decode(body["images"][0]))
    assert width == 2 * height


def test_bedrock_rejects_tampered_and_wrong_signatures(bedrock):
    url, headers, data = signed(bedrock, "amazon.titan-image-generator-v2:0", TITAN_IMAGE)
    tampered = httpx.post(url, content=data.replace(b"calm", b"wild"), headers=headers)
    assert tampered.status_code == 403
    assert tampered.headers["x-amzn-ErrorType"].split(":")[0] == "InvalidSignatureException"
    assert tampered.json()["message"].startswith(
        "The request signature we calculated does not match the signature you provided."
    )
    assert bedrock.last_signature_valid is False

    url, headers, data = signed(
        bedrock, "amazon.titan-image-generator-v2:0", TITAN_IMAGE, secret="x"
    )
    assert httpx.post(url, content=data, headers=headers).status_code == 403
    url, headers, data = signed(
        bedrock, "amazon.titan-image-generator-v2:0", TITAN_IMAGE, region="us-west-2"
    )
    wrong_region = httpx.post(url, content=data, headers=headers)
    assert wrong_region.status_code == 403
    assert "region" in wrong_region.json()["message"]
    unsigned = httpx.post(url, content=data, headers={"Content-Type": "application/json"})
    assert unsigned.status_code == 403
    assert unsigned.headers["x-amzn-ErrorType"].startswith("MissingAuthenticationTokenException")


def test_bedrock_through_botocore_client(bedrock, bedrock_client):
    answer = bedrock_client.invoke_model(
        modelId="amazon.titan-embed-text-v2:0",
        body=json.dumps({"inputText": "one two three", "dimensions": 256}),
        contentType="application/json",
        accept="application/json",
    )
    body = json.loads(answer["body"].read())
    assert len(body["embedding"]) == 256 and body["inputTextTokenCount"] == 3
    assert body["embeddingsByType"]["float"] == body["embedding"]
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    assert headers["x-amzn-bedrock-input-token-count"] == "3"
    assert bedrock.last_signature_valid is True

    with pytest.raises(ClientError) as caught:
        bedrock_client.invoke_model(
            modelId="amazon.titan-image-generator-v2:0",
            body=json.dumps({**TITAN_IMAGE, "textToImageParams": {"text": "forbidden thing"}}),
        )
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert caught.value.response["Error"]["Message"] == (
        "This request has been blocked by our content filters."
    )

    with pytest.raises(ClientError) as caught:
        bedrock_client.invoke_model(modelId="acme.unknown-v1:0", body=b"{}")
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert caught.value.response["Error"]["Message"] == "The provided model identifier is invalid."


def test_bedrock_stability(bedrock, bedrock_client):
    answer = bedrock_client.invoke_model(
        modelId="stability.stable-image-core-v1:1",
        body=json.dumps({"prompt": "a castle", "aspect_ratio": "16:9", "seed": 42}),
    )
    body = json.loads(answer["body"].read())
    assert body["seeds"] == [42] and body["finish_reasons"] == [None]
    assert decode_png(base64.b64decode(body["images"][0]))[:2] == (16, 9)

    filtered = bedrock_client.invoke_model(
        modelId="stability.sd3-5-large-v1:0", body=json.dumps({"prompt": "forbidden castle"})
    )
    assert json.loads(filtered["body"].read()) == {"finish_reasons": ["Filter reason: prompt"]}


def test_bedrock_cohere_and_nova(bedrock, bedrock_client):
    answer = bedrock_client.invoke_model(
        modelId="cohere.embed-english-v3",
        body=json.dumps({"texts": ["hello world", "bye"], "input_type": "search_document"}),
    )
    body = json.loads(answer["body"].read())
    assert body["response_type"] == "embeddings_floats" and body["texts"] == ["hello world", "bye"]
    assert [len(v) for v in body["embeddings"]] == [1024, 1024]
    assert answer["ResponseMetadata"]["HTTPHeaders"]["x-amzn-bedrock-input-token-count"] == "3"

    typed = bedrock_client.invoke_model(
        modelId="cohere.embed-multilingual-v3",
        body=json.dumps(
            {"texts": ["bye"], "input_type": "search_query", "embedding_types": ["float", "int8"]}
        ),
    )
    typed_body = json.loads(typed["body"].read())
    assert typed_body["response_type"] == "embeddings_by_type"
    assert set(typed_body["embeddings"]) == {"float", "int8"}

    nova = bedrock_client.invoke_model(
        modelId="amazon.nova-canvas-v1:0",
        body=json.dumps({**TITAN_IMAGE, "imageGenerationConfig": {"numberOfImages": 1}}),
    )
    assert len(json.loads(nova["body"].read())["images"]) == 1

    bedrock.fail_next(429)
    with pytest.raises(ClientError) as caught:
        bedrock_client.invoke_model(modelId="amazon.nova-canvas-v1:0", body=b"{}")
    assert caught.value.response["Error"]["Code"] == "ThrottlingException"


# --------------------------------------------------------------------------- Gemini


def gemini_post(fake, model_method: str, body: dict, **kwargs):
    kwargs.setdefault("headers", {"x-goog-api-key": GEMINI_KEY})
    return httpx.post(f"{fake.base_url}/models/{model_method}", json=body, **kwargs)


def test_gemini_auth_and_unknown_model(gemini):
    body = {"content": {"parts": [{"text": "x"}]}}
    assert gemini_post(gemini, "gemini-embedding-001:embedContent", body).status_code == 200
    by_query = gemini_post(
        gemini, "gemini-embedding-001:embedContent", body, headers={}, params={"key": GEMINI_KEY}
    )
    assert by_query.status_code == 200
    anonymous = gemini_post(gemini, "gemini-embedding-001:embedContent", body, headers={})
    assert anonymous.status_code == 403
    assert anonymous.json()["error"]["status"] == "PERMISSION_DENIED"
    wrong = gemini_post(
        gemini, "gemini-embedding-001:embedContent", body, headers={"x-goog-api-key": "no"}
    )
    assert wrong.json()["error"]["message"] == "API key not valid. Please pass a valid API key."

    unknown = gemini_post(gemini, "gemini-9:embedContent", body)
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert error["code"] == 404 and error["status"] == "NOT_FOUND"
    assert error["message"].startswith("models/gemini-9 is not found for API version v1beta")


def test_gemini_imagen(gemini):
    answer = gemini_post(
        gemini,
        "imagen-4.0-fast-generate-001:predict",
        {
            "instances": [{"prompt": "a dog"}],
            "parameters": {"sampleCount": 2, "aspectRatio": "9:16"},
        },
    ).json()
    assert len(answer["predictions"]) == 2
    prediction = answer["predictions"][0]
    assert prediction["mimeType"] == "image/png"
    assert decode_png(base64.b64decode(prediction["bytesBase64Encoded"]))[:2] == (9, 16)

    blocked = {"instances": [{"prompt": "forbidden dog"}], "parameters": {"sampleCount": 1}}
    assert gemini_post(gemini, "imagen-4.0-generate-001:predict", blocked).json() == {}
    blocked["parameters"]["includeRaiReason"] = True
    filtered = gemini_post(gemini, "imagen-4.0-generate-001:predict", blocked).json()
    assert list(filtered["predictions"][0]) == ["raiFilteredReason"]


def test_gemini_image_generate_content(gemini):
    body = {
        "contents": [{"parts": [{"text": "draw a small boat"}]}],
        "generationConfig": {
            "responseModalities": ["TEXT", "IMAGE"],
            "imageConfig": {"aspectRatio": "16:9"},
        },
    }
    answer = gemini_post(gemini, "gemini-2.5-flash-image:generateContent", body).json()
    candidate = answer["candidates"][0]
    assert candidate["finishReason"] == "STOP" and candidate["content"]["role"] == "model"
    text_part, image_part = candidate["content"]["parts"]
    assert text_part["text"].startswith("Here is")
    assert image_part["inlineData"]["mimeType"] == "image/png"
    assert decode_png(base64.b64decode(image_part["inlineData"]["data"]))[:2] == (16, 9)
    usage = answer["usageMetadata"]
    assert usage["promptTokenCount"] == 4
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert answer["modelVersion"] == "gemini-2.5-flash-image"

    body["contents"][0]["parts"][0]["text"] = "draw a forbidden boat"
    unsafe = gemini_post(gemini, "gemini-2.5-flash-image:generateContent", body).json()
    assert unsafe["candidates"][0]["finishReason"] == "IMAGE_SAFETY"
    assert "content" not in unsafe["candidates"][0]
    gemini.image_block_mode = "prompt_blocked"
    blocked = gemini_post(gemini, "gemini-2.5-flash-image:generateContent", body).json()
    assert blocked["promptFeedback"]["blockReason"] == "SAFETY" and "candidates" not in blocked


def test_gemini_embeddings(gemini):
    single = gemini_post(
        gemini,
        "gemini-embedding-001:embedContent",
        {
            "content": {"parts": [{"text": "hello"}]},
            "taskType": "RETRIEVAL_QUERY",
            "outputDimensionality": 768,
        },
    ).json()
    assert list(single) == ["embedding"] and len(single["embedding"]["values"]) == 768  # no usage

    batch = gemini_post(
        gemini,
        "text-embedding-004:batchEmbedContents",
        {
            "requests": [
                {"model": "models/text-embedding-004", "content": {"parts": [{"text": t}]}}
                for t in ("a", "b", "a")
            ]
        },
    ).json()
    vectors = [e["values"] for e in batch["embeddings"]]
    assert [len(v) for v in vectors] == [768, 768, 768]
    assert vectors[0] == vectors[2] != vectors[1]

    mismatch = gemini_post(
        gemini,
        "text-embedding-004:batchEmbedContents",
        {
            "requests": [
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]}}
            ]
        },
    )
    assert mismatch.status_code == 400 and mismatch.json()["error"]["status"] == "INVALID_ARGUMENT"

"""Streams the client leaves are billed for what the provider produced (README, Decisions), and
SSE events are read in every framing the standard allows."""

from __future__ import annotations

import json
import logging
import math
import random

import httpx
import pytest
from django.db.models import Sum

from catalog.models import Model
from fake_upstreams import serve
from fake_upstreams.server import FakeUpstream, sse_response
from inference import tokens
from inference.billing import Usage, credits_for
from inference.streaming import SSEDecoder, parse_event
from licensing.models import Transaction, Wallet
from tests.kit import wait_until

from ..conftest import UPSTREAM_KEY

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
PROMPT = "hello big world"
HELLO = [{"role": "user", "content": PROMPT}]
# The usage the provider sends at once arrives well inside the grace period, and what comes late
# (a late usage event, a stall) well after it: margins of seconds, so a loaded machine (CI beside
# other work) cannot move an event across the line (0.05 s against 0.5 s once did).
GRACE = 4.0
SOON = 0.0
WITHIN = GRACE / 4  # after the client has left, inside the grace
LATE = 4 * GRACE


@pytest.fixture
def grace(settings):
    settings.GATEWAY = {**settings.GATEWAY, "STREAM_USAGE_GRACE": GRACE}
    return GRACE


@pytest.fixture
def funded(make_license, make_key):
    license = make_license(name="funded", limit=10**9)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def price(model_id: str, usage: Usage) -> int:
    return credits_for(Model.objects.get(model_id=model_id).cost, usage)


def leave_after(gateway, path, body, headers, events: int) -> str:
    """Open a stream, read `events` events, hang up; the request id."""
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        with http.stream("POST", path, json=body, headers=headers) as response:
            assert response.status_code == 200
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if received.count(b"\n\n") >= events:
                    break
            return response.headers["X-Request-Id"]


def sent_data(sent: list[bytes]) -> list[dict | str]:
    out = []
    for event in sent:
        _, data = parse_event(event)
        out.append(data.decode() if data == b"[DONE]" else json.loads(data))
    return out


def o200k(text: str) -> int:
    return tokens.count_text(text, MINI)


# --- disconnects at random points ------------------------------------------------------------


def test_clients_leaving_at_random_points_pay_for_what_was_produced(
    gateway, catalog, funded, grace
):
    """40 streams, each left after a random number of events, while the provider sends its
    usage soon after the content (within the grace period: billed exactly), late (after it:
    estimated), or stalls mid-answer (estimated on what it produced)."""
    license, auth = funded
    fake = catalog["direct"]
    fake.chunk_delay = 0.01
    fake.stream_pieces = 8  # events: role, 8 contents (replies of 16/24/32 words), finish,
    # usage, [DONE]
    fake.stream_stall_seconds = LATE
    rng = random.Random(20261123)
    streams = {}
    for index in range(40):
        mode = rng.choice(["usage_soon", "usage_late", "stall"])
        fake.usage_delay = {"usage_soon": SOON, "usage_late": LATE, "stall": 0.0}[mode]
        fake.stream_stall_after = rng.randint(1, 9) if mode == "stall" else None
        leave = rng.randint(1, 11)  # at most the usage chunk: the client never sees [DONE]
        if mode == "stall":
            leave = min(leave, fake.stream_stall_after)
        if mode == "usage_late":
            leave = min(leave, 10)  # the client does not wait for the late usage
        fake.reply_text = f"Reply {index}: " + " ".join(
            rng.choices(WORDS, k=rng.choice([14, 22, 30]))
        )
        body = {"model": MINI, "messages": HELLO, "stream": True}
        request_id = leave_after(gateway, "/v1/chat/completions", body, auth, leave)
        streams[f"Reply {index}:"] = (request_id, mode)
    wait_until(lambda: len(fake.streams_sent) == 40, timeout=60)
    wait_until(lambda: Transaction.objects.count() == 40, timeout=60)

    expected_total = 0
    modes_billed = {"exact": 0, "estimate": 0, "nothing": 0}
    for sent in fake.streams_sent:
        data = sent_data(sent)
        text = "".join(
            c["choices"][0]["delta"].get("content") or ""
            for c in data
            if isinstance(c, dict) and c["choices"]
        )
        tag = next((key for key in streams if text.startswith(key)), None)
        request_id, mode = streams.pop(tag) if tag else _only_unstarted(streams)
        row = Transaction.objects.get(request_id=request_id)
        usage_chunks = [c for c in data if isinstance(c, dict) and not c["choices"]]
        if "[DONE]" in data:
            assert row.status_code in (200, 499)
        else:
            assert row.status_code == 499
        if usage_chunks:  # the provider's own usage reached the gateway in time
            reported = usage_chunks[0]["usage"]
            usage = Usage(
                prompt_tokens=reported["prompt_tokens"],
                completion_tokens=reported["completion_tokens"],
            )
            assert mode == "usage_soon"
            modes_billed["exact"] += 1
        elif text:
            # The documented estimate: the chat formula on the prompt, the produced text.
            usage = Usage(prompt_tokens=o200k(PROMPT) + 3 + 3, completion_tokens=o200k(text))
            assert mode in ("usage_late", "stall")
            modes_billed["estimate"] += 1
        else:
            usage = Usage(prompt_tokens=None, completion_tokens=None)
            modes_billed["nothing"] += 1
        assert (row.prompt_tokens, row.completion_tokens) == (
            usage.prompt_tokens,
            usage.completion_tokens,
        ), (tag, mode, sent)
        expected = price(MINI, usage) if usage.prompt_tokens is not None else 0
        assert row.credits == expected
        expected_total += expected
    assert modes_billed["exact"] > 5 and modes_billed["estimate"] > 5, modes_billed
    ledger = Transaction.objects.aggregate(total=Sum("credits"))["total"]
    assert ledger == expected_total > 0
    assert Wallet.objects.get(license=license).spent == ledger


def _only_unstarted(streams):
    """A stream that stalled before any content: it cannot be told apart by its text, so it
    is the one left whose row has no tokens."""
    for tag, (request_id, mode) in list(streams.items()):
        row = Transaction.objects.get(request_id=request_id)
        if row.completion_tokens is None:
            streams.pop(tag)
            return request_id, mode
    raise AssertionError("no unstarted stream left")


WORDS = (
    "the cat sat on a mat and then it ran far away from home to see the big red sun "
    "over green hills where birds sing songs of joy every morning"
).split()


def test_usage_arriving_within_the_grace_period_is_billed_exactly(gateway, catalog, funded, grace):
    fake = catalog["direct"]
    fake.usage_delay = WITHIN
    fake.reply_text = "one two three four five six seven eight"
    body = {"model": MINI, "messages": HELLO, "stream": True}
    # Left after the role chunk and one content piece: the rest, and the usage, came later.
    request_id = leave_after(gateway, "/v1/chat/completions", body, funded[1], 2)
    wait_until(lambda: Transaction.objects.filter(request_id=request_id).exists(), timeout=60)
    row = Transaction.objects.get(request_id=request_id)
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (499, 3, 8)
    assert row.credits == price(MINI, Usage(prompt_tokens=3, completion_tokens=8))


def test_a_client_leaving_before_any_text_pays_nothing(gateway, catalog, funded, grace):
    fake = catalog["direct"]
    fake.stream_stall_after = 1  # the role chunk, then nothing for longer than the grace
    fake.stream_stall_seconds = LATE
    body = {"model": MINI, "messages": HELLO, "stream": True}
    request_id = leave_after(gateway, "/v1/chat/completions", body, funded[1], 1)
    wait_until(lambda: Transaction.objects.filter(request_id=request_id).exists(), timeout=60)
    row = Transaction.objects.get(request_id=request_id)
    assert (row.status_code, row.credits, row.completion_tokens) == (499, 0, None)


def test_a_model_outside_the_openai_family_is_estimated_on_characters(
    gateway, catalog, funded, grace
):
    model = "meta-llama/llama-3.1-8b-instruct"
    fake = catalog["aggregator"]
    fake.reply_text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit"
    fake.stream_stall_after = 3  # role chunk and two content pieces, then silence
    fake.stream_stall_seconds = LATE
    body = {"model": model, "messages": HELLO, "stream": True}
    headers = {**funded[1], "X-Service-Provider": "aggregator"}
    request_id = leave_after(gateway, "/v1/chat/completions", body, headers, 3)
    wait_until(lambda: len(fake.streams_sent) == 1, timeout=60)
    wait_until(lambda: Transaction.objects.filter(request_id=request_id).exists(), timeout=60)
    text = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in sent_data(fake.streams_sent[0])
        if isinstance(c, dict) and c.get("choices")
    )
    row = Transaction.objects.get(request_id=request_id)
    prompt = math.ceil(len(PROMPT) / 4) + 3 + 3
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (
        499,
        prompt,
        math.ceil(len(text) / 4),
    )
    assert row.credits == price(
        model, Usage(prompt_tokens=prompt, completion_tokens=math.ceil(len(text) / 4))
    )


def test_streams_that_end_normally_are_billed_from_the_provider_usage(
    client, catalog, funded, grace
):
    catalog["direct"].usage_delay = SOON
    response = client.post(
        "/v1/chat/completions",
        json={"model": MINI, "messages": HELLO, "stream": True},
        headers=funded[1],
    )
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    wait_until(lambda: Transaction.objects.exists(), timeout=60)
    row = Transaction.objects.get()
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (200, 3, 4)


# --- responses ---------------------------------------------------------------------------------


def test_responses_stream_left_early(gateway, catalog, funded, grace):
    fake = catalog["direct"]
    fake.reply_text = "alpha beta gamma delta epsilon zeta eta theta"
    fake.stream_pieces = 8
    fake.chunk_delay = 0.01
    body = {"model": MINI, "input": PROMPT, "instructions": "Be brief.", "stream": True}
    # Usage soon after the text: the provider's figures.
    fake.usage_delay = WITHIN
    exact = leave_after(gateway, "/v1/responses", body, funded[1], 6)
    # Usage too late: the gateway's count of the prompt and of the deltas relayed.
    fake.usage_delay = LATE
    estimated = leave_after(gateway, "/v1/responses", body, funded[1], 6)
    wait_until(lambda: Transaction.objects.count() == 2, timeout=60)
    row = Transaction.objects.get(request_id=exact)
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (499, 3 + 2, 8)
    assert row.credits == price(MINI, Usage(prompt_tokens=5, completion_tokens=8))
    row = Transaction.objects.get(request_id=estimated)
    prompt = 3 + o200k("Be brief.") + 3 + o200k(PROMPT) + 3
    completion = o200k(fake.reply_text)
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (
        499,
        prompt,
        completion,
    )
    assert row.credits == price(MINI, Usage(prompt_tokens=prompt, completion_tokens=completion))
    ledger = Transaction.objects.aggregate(total=Sum("credits"))["total"]
    assert Wallet.objects.get(license=funded[0]).spent == ledger


# --- SSE framing --------------------------------------------------------------------------------


class RawSSE(FakeUpstream):
    """Answers every stream with the byte chunks it is given, each one written on its own."""

    name = "raw-sse"
    base_path = "/v1"
    ROUTES = [
        ("POST", r"/v1/chat/completions", "answer"),
        ("POST", r"/v1/responses", "answer"),
    ]
    KNOBS = {"chunks": []}

    def answer(self, request):
        return sse_response(list(self.chunks))


@pytest.fixture
def raw_upstream(catalog):
    from catalog.services import connection_configure
    from core.localcache import clear_all

    fake = RawSSE()
    fake.chunk_delay = 0.02  # every chunk its own TCP segment
    with serve(fake):
        connection_configure(provider_slug="direct", base_url=fake.base_url, api_key=UPSTREAM_KEY)
        clear_all()
        yield fake


CHAT_CHUNKS = [
    b"\xef\xbb\xbf"  # a byte-order mark opens the stream
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\r\n\r\n',
    b": ping\r\n\r\n",
    b'id: 7\r\ndata: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hel',  # split event
    b'lo"}}]}\r\n\r',  # split between CR and LF
    b"\n",
    b'retry: 100\ndata: {"id":"c1","choices":[],\n'
    b'data: "usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}\n\n',
    b"data: [DONE]\r\r",  # CR line endings
]


def test_chat_events_in_any_framing_are_relayed_and_billed(client, raw_upstream, funded):
    raw_upstream.chunks = CHAT_CHUNKS
    response = client.post(
        "/v1/chat/completions",
        json={"model": MINI, "messages": HELLO, "stream": True},
        headers=funded[1],
    )
    assert response.status_code == 200
    events = [parse_event(b + b"\n\n") for b in response.content.split(b"\n\n") if b]
    assert [data for _, data in events] == [
        b'{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        None,  # the comment, passed on
        b'{"id":"c1","choices":[{"index":0,"delta":{"content":"Hello"}}]}',
        b'{"id":"c1","choices":[],\n"usage":{"prompt_tokens":11,"completion_tokens":2,'
        b'"total_tokens":13}}',
        b"[DONE]",
    ]
    wait_until(lambda: Transaction.objects.exists(), timeout=60)
    row = Transaction.objects.get()
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (200, 11, 2)
    assert row.credits == price(MINI, Usage(prompt_tokens=11, completion_tokens=2))


def test_sdk_reads_the_relayed_framing(gateway, raw_upstream, api_key):
    import openai

    raw_upstream.chunks = CHAT_CHUNKS
    sdk = openai.OpenAI(api_key=api_key, base_url=gateway.url + "/v1", max_retries=0)
    chunks = list(sdk.chat.completions.create(model=MINI, messages=HELLO, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert chunks[-1].usage.prompt_tokens == 11


def test_responses_completed_event_with_id_first_is_billed(client, raw_upstream, funded):
    completed = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}},
    }
    raw_upstream.chunks = [
        b'id: 1\nevent: response.created\ndata: {"type":"response.created","response":{}}\n\n',
        b'data: {"type":"response.output_text.delta","delta":"Hi"}\n'
        b"event: response.output_text.delta\n\n",
        b"id: 9\n: the last one\nevent: response.completed\ndata: "
        + json.dumps(completed).encode()
        + b"\n\n",
    ]
    response = client.post(
        "/v1/responses", json={"model": MINI, "input": "hi", "stream": True}, headers=funded[1]
    )
    assert response.status_code == 200 and b"error" not in response.content
    wait_until(lambda: Transaction.objects.exists(), timeout=60)
    row = Transaction.objects.get()
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (200, 20, 5)


def test_responses_events_named_only_in_their_data(client, raw_upstream, funded):
    completed = {"type": "response.completed", "response": {"usage": {"input_tokens": 4}}}
    raw_upstream.chunks = [b"data: " + json.dumps(completed).encode() + b"\n\n"]
    response = client.post(
        "/v1/responses", json={"model": MINI, "input": "hi", "stream": True}, headers=funded[1]
    )
    assert response.status_code == 200
    wait_until(lambda: Transaction.objects.exists(), timeout=60)
    assert Transaction.objects.get().prompt_tokens == 4


def _responses_event(kind: str, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps({"type": kind, **fields}).encode()


DELTA = "response.output_text.delta"
UPSTREAM_ERROR = {"type": "error", "message": "Slow down.", "sequence_number": 2}


@pytest.mark.parametrize(
    "chunks, error",
    [
        (  # the upstream's own error event, after a keep-alive comment: its code and param
            [
                _responses_event("response.created", sequence_number=0, response={}) + b"\n\n",
                _responses_event(DELTA, sequence_number=1, delta="Hi") + b"\n\n: ping\n\n",
                _responses_event(
                    "error", **UPSTREAM_ERROR, code="rate_limit_exceeded", param="input"
                )
                + b"\n\n",
            ],
            {"code": "rate_limit_exceeded", "message": "Slow down.", "param": "input", "seq": 2},
        ),
        (  # codes and params that are not identifiers are not relayed
            [
                _responses_event(DELTA, sequence_number=1, delta="Hi") + b"\n\n",
                _responses_event("error", **UPSTREAM_ERROR, code="a b\n", param=7) + b"\n\n",
            ],
            {"code": "server_error", "message": "Slow down.", "param": None, "seq": 2},
        ),
        (  # the upstream ends without its end marker: the gateway's own failure
            [_responses_event(DELTA, sequence_number=41, delta="Hi") + b"\n\n"],
            {"code": "server_error", "message": "Service temporarily unavailable", "seq": 42},
        ),
        (  # an upstream that numbers no events
            [_responses_event(DELTA, delta="Hi") + b"\n\n"],
            {"code": "server_error", "message": "Service temporarily unavailable", "seq": 0},
        ),
        (  # a number no client could read back
            [_responses_event(DELTA, sequence_number=2**64 - 1, delta="Hi") + b"\n\n"],
            {"code": "server_error", "message": "Service temporarily unavailable", "seq": 0},
        ),
    ],
)
def test_responses_error_event(client, raw_upstream, funded, chunks, error):
    raw_upstream.chunks = chunks
    response = client.post(
        "/v1/responses", json={"model": MINI, "input": "hi", "stream": True}, headers=funded[1]
    )
    assert response.status_code == 200
    name, data = parse_event(response.content.rsplit(b"\n\n", 2)[-2] + b"\n\n")
    assert name == b"error" and b"[DONE]" not in response.content
    assert json.loads(data) == {
        "type": "error",
        "code": error["code"],
        "message": error["message"],
        "param": error.get("param"),
        "sequence_number": error["seq"],
    }
    wait_until(lambda: Transaction.objects.exists(), timeout=60)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.error_message) == (503, 0, error["message"])


STREAM = (
    b": ping\r\n\r\nid: 1\r\nevent: a\r\ndata: x\r\ndata: y\r\n\r\n"
    b"data: z\revent: b\r\rretry: 5\nid: 2\ndata:no-space\n\n\n\ndata: last"
)
EXPECTED = [(None, None), (b"a", b"x\ny"), (b"b", b"z"), (None, b"no-space"), (None, b"last")]


def _decode(chunks):
    decoder = SSEDecoder()
    blocks = [block for chunk in chunks for block in decoder.feed(chunk)] + decoder.flush()
    return [parse_event(block) for block in blocks]


def test_decoder_whole_and_split_at_every_byte():
    assert _decode([STREAM]) == EXPECTED
    for cut in range(1, len(STREAM)):
        assert _decode([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut
    assert _decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_decoder_relays_each_event_as_soon_as_it_is_complete():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n") == []
    assert decoder.feed(b"\ndata: 2") == [b"data: 1\n\n"]
    assert decoder.feed(b"\r") == []  # maybe half a CRLF
    assert decoder.feed(b"\r\n") == [b"data: 2\n\n"]


# --- the estimate --------------------------------------------------------------------------------


def test_encodings_by_model():
    assert tokens.encoding_name("gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_name("openai/gpt-4.1") == "o200k_base"
    assert tokens.encoding_name("o4-mini") == "o200k_base"
    assert tokens.encoding_name("gpt-5-nano") == "o200k_base"
    assert tokens.encoding_name("gpt-4-0613") == "cl100k_base"
    assert tokens.encoding_name("gpt-3.5-turbo") == "cl100k_base"
    assert tokens.encoding_name("meta-llama/llama-3.1-8b-instruct") is None
    assert tokens.count_text("hello big world", "gpt-4o") == 3
    assert tokens.count_text("hello big world", "llama") == math.ceil(15 / 4)
    # Hostile text is counted, never an error: special tokens, lone surrogates, 2 MB.
    assert tokens.count_text("<|endoftext|>", "gpt-4o") > 1
    assert tokens.count_text("a\ud800b", "gpt-4o") >= 2
    assert 400_000 <= tokens.count_text("word " * 400_000, "gpt-4o") <= 400_100


def test_chat_prompt_formula():
    payload = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "name": "ana", "content": [{"type": "text", "text": PROMPT}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        ]
    }
    expected = (3 + o200k("Be brief.")) + (3 + o200k(PROMPT) + 1 + o200k("ana")) + (3 + 85) + 3
    assert tokens.chat_prompt_tokens(payload, MINI) == expected


def test_a_relay_dropped_before_its_first_byte_still_settles(upstreams, grace):
    """The client can leave between the response's headers and its first byte, so that the
    server never iterates the body: the stream is still read, settled and told once."""
    import asyncio
    import gc

    from inference import streaming

    fake = upstreams["direct"]
    body = {
        "model": MINI,
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def scenario():
        told = []
        async with httpx.AsyncClient() as http:
            request = http.build_request(
                "POST",
                fake.base_url + "/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {UPSTREAM_KEY}"},
            )
            response = await http.send(request, stream=True)
            events = streaming.relay(
                streaming.ProviderStream(response, streaming.ChatSSE(body, MINI)), told.append
            )
            del events
            gc.collect()
            for _ in range(1200):  # a deadline of 60 s, not a wait: it ends when told
                if told and not streaming._background:
                    break
                await asyncio.sleep(0.05)
        return told

    told = asyncio.run(scenario())
    assert len(told) == 1
    assert (told[0].status, told[0].usage.prompt_tokens, told[0].usage.completion_tokens) == (
        499,
        3,
        4,
    )


def test_a_client_hanging_up_at_the_end_marker_got_a_complete_stream(gateway, raw_upstream, funded):
    """The openai SDK closes its connection once it reads `[DONE]`; the upstream may not have
    closed its own yet. That stream is complete: 200, billed from the usage."""
    raw_upstream.chunks = [
        b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
        b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n',
        b"data: [DONE]\n\n",
        b": the upstream lingers before closing\n\n",
    ]
    raw_upstream.stream_stall_after = 3
    raw_upstream.stream_stall_seconds = LATE
    body = {"model": MINI, "messages": HELLO, "stream": True}
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json=body, headers=funded[1]) as r:
            received = b""
            for chunk in r.iter_raw():
                received += chunk
                if b"[DONE]" in received:
                    break
            request_id = r.headers["X-Request-Id"]
    wait_until(lambda: Transaction.objects.filter(request_id=request_id).exists(), timeout=60)
    row = Transaction.objects.get(request_id=request_id)
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (200, 3, 1)
    assert row.credits == price(MINI, Usage(prompt_tokens=3, completion_tokens=1))


def test_events_that_arrive_together_are_relayed_in_one_write():
    """The relay joins what is already queued (a burst of deltas) into one chunk, and still
    ends at the end marker with the outcome reported once."""
    import asyncio

    from inference.streaming import _END, StreamOutcome, _relay

    class Upstream:
        def __init__(self):
            self.queue = asyncio.Queue()
            self.outcome = StreamOutcome()
            self.relay_started = False

        def client_left(self, finished):  # pragma: no cover - the client stays here
            raise AssertionError("the client did not leave")

    async def relayed():
        upstream, told = Upstream(), []
        for event in (b"data: 1\n\n", b"data: 2\n\n"):
            upstream.queue.put_nowait(event)
        chunks = []
        events = _relay(upstream, told.append)
        chunks.append(await events.__anext__())  # the two queued events, joined
        for event in (b"data: 3\n\n", b"data: [DONE]\n\n", _END):
            upstream.queue.put_nowait(event)
        chunks.extend([chunk async for chunk in events])
        return chunks, told

    chunks, told = asyncio.run(relayed())
    assert chunks == [b"data: 1\n\ndata: 2\n\n", b"data: 3\n\ndata: [DONE]\n\n"]
    assert len(told) == 1 and told[0].status == 200


def test_the_primed_first_event_goes_out_in_the_turn_of_the_headers():
    """`prime` holds the upstream's first bytes before the response starts: the relay sends
    their event at once, not after a turn of the loop for the reading task (under load each
    turn waits behind every other stream's work). The rest is read as before."""
    import asyncio

    from inference import streaming

    first = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    last = (
        b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
        b"data: [DONE]\n\n"
    )

    class Response:
        closed = False

        async def aclose(self):
            self.closed = True

    async def scenario():
        more = asyncio.Event()

        async def rest():
            await more.wait()
            yield last

        response, told, turns = Response(), [], []
        body = {"model": MINI, "messages": HELLO, "stream": True}
        stream = streaming.ProviderStream(
            response, streaming.ChatSSE(body, MINI), first=first, rest=rest()
        )
        events = streaming.relay(stream, told.append)
        asyncio.get_running_loop().call_soon(turns.append, "a turn")
        sent = [await anext(events)]
        no_turn_yet = turns == []
        more.set()
        sent += [chunk async for chunk in events]
        return sent, no_turn_yet, told, response.closed

    sent, no_turn_yet, told, closed = asyncio.run(scenario())
    assert no_turn_yet
    assert b"".join(sent) == first + last and sent[0] == first
    assert len(told) == 1 and told[0].status == 200 and told[0].usage.completion_tokens == 1
    assert closed


def test_first_bytes_an_adapter_cannot_decode_end_the_stream_with_an_error_event(caplog):
    """A decoder that raises on the primed bytes: the client gets the stream's error event and
    the outcome is a 503, as for a break later in the stream."""
    import asyncio

    from inference import streaming

    class Response:
        async def aclose(self):
            pass

    class Refusing:
        def __init__(self, max_event):
            pass

        def feed(self, data):
            raise KeyError("choices")

        def flush(self):  # pragma: no cover - not reached
            return []

    async def scenario():
        async def rest():
            yield b"data: never read\n\n"

        told = []
        body = {"model": MINI, "messages": HELLO, "stream": True}
        stream = streaming.ProviderStream(
            Response(), streaming.ChatSSE(body, MINI), Refusing, first=b"{", rest=rest()
        )
        return [chunk async for chunk in streaming.relay(stream, told.append)], told

    logger = logging.getLogger("gateway")
    logger.addHandler(caplog.handler)
    try:
        sent, told = asyncio.run(scenario())
    finally:
        logger.removeHandler(caplog.handler)
    assert len(sent) == 1 and b"error" in sent[0]
    assert len(told) == 1 and told[0].status == 503
    assert "decoding a stream failed" in caplog.text


def _broken_later(caplog, decoder=None, reader_error=None):
    """A stream whose first event relays and whose next chunk fails: in the decoder (an
    adapter's, on bytes it did not expect) or in the adapter's own reader."""
    import asyncio

    from inference import streaming

    class Response:
        async def aclose(self):
            pass

    first = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'

    async def scenario():
        async def rest():
            if reader_error is not None:
                raise reader_error
            yield b"data: {\n\n"

        told = []
        body = {"model": MINI, "messages": HELLO, "stream": True}
        stream = streaming.ProviderStream(
            Response(), streaming.ChatSSE(body, MINI), decoder, first=first, rest=rest()
        )
        sent = [chunk async for chunk in streaming.relay(stream, told.append)]
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return sent, told, leftover

    logger = logging.getLogger("gateway")
    logger.addHandler(caplog.handler)
    try:
        sent, told, leftover = asyncio.run(scenario())
    finally:
        logger.removeHandler(caplog.handler)
    body = b"".join(sent)
    assert body.startswith(first) and b'"error"' in body[len(first) :]
    assert len(told) == 1 and told[0].status == 503
    assert leftover == []
    return caplog.text


def test_a_later_chunk_an_adapter_cannot_decode_ends_the_stream_with_an_error_event(caplog):
    """The decoder raises on the second chunk, not the primed one: the same error event and
    503, and the reading task ends cleanly (no exception left unretrieved on the loop)."""
    from inference.providers.events import SSEDecoder

    class RefusingLater(SSEDecoder):
        def feed(self, data):
            if data.startswith(b"data: {\n"):
                raise KeyError("choices")
            return super().feed(data)

    assert "decoding a stream failed" in _broken_later(caplog, RefusingLater)


def test_an_adapter_reader_that_raises_ends_the_stream_with_an_error_event(caplog):
    assert "reading a stream failed" in _broken_later(caplog, reader_error=ValueError("frame"))

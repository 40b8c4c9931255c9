"""Server-sent events relayed from a provider to the client as they arrive.

The upstream response is already open and its status checked (Transport.open_stream), so every
failure up to here was a normal JSON error. From the first byte on the status is 200, and a
failure is reported inside the stream, in the endpoint's own way (spec: Events):
- chat completions: `data: {"error": {"message", "type"}}` and then `data: [DONE]`;
- responses: `event: error` with `data: {"type": "error", "code", "message", "param",
  "sequence_number"}`, as the Responses API sends it, and no `[DONE]`. `sequence_number` is one
  past the last relayed event's (0 before any): only the last relayed event is kept, and read
  only when an error is sent. `code` and `param` are the upstream's when it sent the error
  event, else `server_error` and null.
Usage is picked out of the events on the way (the request is billed exactly like a
non-streamed one) and the ledger row is written once the stream ends, whatever way it ends.

The upstream is read by a task of its own, so that a client who leaves does not cut the read
short: the reader goes on, without sending, for at most `STREAM_USAGE_GRACE` seconds, and the
usage event the provider sends in that time is what the 499 is billed. Without it the prompt
and the text the provider produced are counted (inference.tokens), only then: a stream that
ends normally does no counting.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from django.conf import settings

from catalog.models import HOSTED_SEARCH
from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE

from . import tokens
from .billing import Usage
from .providers import usage as usage_formats
from .providers.base import ProviderFailure, sanitize_message, unavailable
from .providers.events import DecoderFactory, EventTooLarge, SSEDecoder, StreamBroken, parse_event
from .providers.pool import StreamTooLarge
from .schemas.common import INT64_MAX

logger = logging.getLogger("gateway")


@dataclass
class StreamOutcome:
    usage: Usage | None = None
    completed: bool = False  # the upstream's own end-of-stream marker was seen
    failure: str | None = None  # message sent to the client when the stream broke
    status: int = 200
    estimated: bool = False  # usage counted by the gateway (a client that left early)
    upstream_id: str = ""  # the provider's id of the answer (chatcmpl-..., resp_...)
    response_model: str = ""  # the model the provider's events name (tracing)
    first_event_at: float = 0.0  # perf_counter when the provider's first event came (metrics)


class SSEProtocol:
    """How one endpoint's events are read, how a failure is told, and how the tokens of a
    stream the client left are estimated. One instance per stream."""

    def __init__(self, payload: dict | None = None, model: str = ""):
        self.payload = payload or {}
        self.model = model
        self.kept: list[tuple[bytes | None, bytes]] = []  # events with text, for an estimate

    def inspect(self, block: bytes, outcome: StreamOutcome) -> bytes | None:
        """Note usage/completion; return the bytes to send (None: the upstream failed)."""
        raise NotImplementedError

    def error_event(self, message: str) -> bytes:
        raise NotImplementedError

    def produced_texts(self) -> list[str]:
        """The text the provider produced so far, one string per choice or output item."""
        raise NotImplementedError

    def prompt_tokens(self) -> int:
        raise NotImplementedError

    def estimate(self) -> Usage | None:
        """Prompt + produced tokens; None when the provider produced no text yet."""
        completion = tokens.completion_tokens(self.produced_texts(), self.model)
        if completion == 0:
            return None
        prompt = self.prompt_tokens()
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cached_tokens=0,
        )


def answer_id(value) -> str:
    """The provider's id of an answer, as the ledger keeps it ("" when there is none)."""
    return value if isinstance(value, str) else ""


def _chunk_ids(data: bytes) -> tuple[str, str]:
    """(answer id, model) of a chat chunk."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "", ""
    if not isinstance(chunk, dict):
        return "", ""
    return answer_id(chunk.get("id")), answer_id(chunk.get("model"))


def _response_ids(data: bytes) -> tuple[str, str]:
    """(answer id, model) of a responses event that carries the response."""
    try:
        response = orjson.loads(data).get("response")
    except (orjson.JSONDecodeError, AttributeError):
        return "", ""
    if not isinstance(response, dict):
        return "", ""
    return answer_id(response.get("id")), answer_id(response.get("model"))


def _failure_message(error) -> str:
    message = error.get("message") if isinstance(error, dict) else None
    return sanitize_message(str(message or PROVIDER_ERROR))


def _usage_or_none(parse, *value) -> Usage | None:
    try:
        return parse(*value)
    except ProviderFailure:
        return None  # logged by the parser; the stream is recorded without usage


class ChatSSE(SSEProtocol):
    def inspect(self, block, outcome):
        _, data = parse_event(block)
        if data is None:
            return block  # a comment (keep-alive) or an id/retry-only block
        if data == b"[DONE]":
            outcome.completed = True
            return block
        self.kept.append((None, data))
        if not outcome.upstream_id:
            # Every chunk carries them: read the first.
            outcome.upstream_id, outcome.response_model = _chunk_ids(data)
        if b'"usage"' in data or b'"error"' in data:
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                return block
            if isinstance(chunk, dict):
                if chunk.get("error"):
                    outcome.failure = _failure_message(chunk["error"])
                    return None
                if isinstance(chunk.get("usage"), dict):
                    outcome.usage = _usage_or_none(usage_formats.openai_chat, chunk["usage"])
        return block

    def error_event(self, message):
        body = {"error": {"message": message, "type": "server_error"}}
        return b"data: " + orjson.dumps(body) + b"\n\ndata: [DONE]\n\n"

    def produced_texts(self):
        by_choice: dict = {}
        for _, data in self.kept:
            try:
                chunk = orjson.loads(data)
                choices = chunk.get("choices") or ()
                for choice in choices:
                    parts = by_choice.setdefault(choice.get("index", 0), [])
                    parts.extend(_chat_delta_texts(choice.get("delta") or {}))
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                continue
        return ["".join(parts) for parts in by_choice.values()]

    def prompt_tokens(self):
        return tokens.chat_prompt_tokens(self.payload, self.model)


def _chat_delta_texts(delta: dict) -> list[str]:
    texts = [
        delta[key]
        for key in ("content", "refusal", "reasoning", "reasoning_content")
        if isinstance(delta.get(key), str)
    ]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            texts += [f for k in ("name", "arguments") if isinstance(f := function.get(k), str)]
    return texts


class ResponsesSSE(SSEProtocol):
    FINAL = {b"response.completed", b"response.incomplete", b"response.failed"}
    last: bytes | None = None  # the data of the last event relayed (its sequence_number)
    error_code: str = "server_error"
    error_param: str | None = None
    # Events whose `delta` is text the model produced (audio deltas are not text).
    TEXT_DELTAS = {
        b"response.output_text.delta",
        b"response.refusal.delta",
        b"response.function_call_arguments.delta",
        b"response.custom_tool_call_input.delta",
        b"response.reasoning_text.delta",
        b"response.reasoning_summary_text.delta",
        b"response.audio.transcript.delta",
    }

    # Output item events: a hosted web search is counted when its item opens (the provider
    # bills it once started), so that a stream the client left is billed the searches seen.
    ITEM_EVENTS = {b"response.output_item.added", b"response.output_item.done"}

    def __init__(self, payload: dict | None = None, model: str = ""):
        super().__init__(payload, model)
        self.searches: set = set()  # the hosted web searches seen: their item ids

    def inspect(self, block, outcome):
        name, data = parse_event(block)
        if data is None:
            return block
        if name is None:
            name = _type_of(data)  # an upstream that names events only inside the data
        if name in self.TEXT_DELTAS:
            self.kept.append((name, data))
            self.last = data
            return block
        if name in self.ITEM_EVENTS and _SEARCH_ITEM in data:
            self._note_search(data)
        if name == b"response.created" and not outcome.upstream_id:
            outcome.upstream_id, outcome.response_model = _response_ids(data)
        if name == b"error":
            self._note_error(data, outcome)
            return None
        self.last = data
        if name in self.FINAL:
            self._note_final(data, outcome)
        return block

    def _note_error(self, data: bytes, outcome: StreamOutcome) -> None:
        """The provider's error event: its message is the stream's failure, its code and param
        those of the error event the client gets."""
        try:
            error = orjson.loads(data)
        except orjson.JSONDecodeError:
            error = {}
        outcome.failure = _failure_message(error)
        if isinstance(error, dict):
            self.error_code = _identifier(error.get("code")) or self.error_code
            self.error_param = _identifier(error.get("param"))

    def _note_final(self, data: bytes, outcome: StreamOutcome) -> None:
        """A final event (completed, incomplete, failed): the answer's ids when not yet known,
        and its usage, with at least as many searches as were seen."""
        outcome.completed = True
        try:
            response = orjson.loads(data).get("response") or {}
        except (orjson.JSONDecodeError, AttributeError):
            response = {}
        if not isinstance(response, dict):
            return
        if not outcome.upstream_id:
            outcome.upstream_id = answer_id(response.get("id"))
            outcome.response_model = answer_id(response.get("model"))
        if isinstance(response.get("usage"), dict):
            outcome.usage = _usage_or_none(
                usage_formats.openai_responses, response["usage"], response.get("output")
            )
            if outcome.usage is not None and len(self.searches) > (outcome.usage.units or 0):
                outcome.usage.units = len(self.searches)

    def _note_search(self, data: bytes) -> None:
        try:
            event = orjson.loads(data)
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == HOSTED_SEARCH:
                self.searches.add(item.get("id") or event.get("output_index"))
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return

    def estimate(self):
        """The tokens counted, and the hosted searches seen: billed even without text."""
        usage = super().estimate()
        if not self.searches:
            return usage
        if usage is None:
            prompt = self.prompt_tokens()
            usage = Usage(prompt_tokens=prompt, completion_tokens=0, total_tokens=prompt)
        usage.units = len(self.searches)
        return usage

    def error_event(self, message):
        # The Responses API's error event (the openai SDK's ResponseErrorEvent).
        data = orjson.dumps(
            {
                "type": "error",
                "code": self.error_code,
                "message": message,
                "param": self.error_param,
                "sequence_number": self._next_sequence_number(),
            }
        )
        return b"event: error\ndata: " + data + b"\n\n"

    def _next_sequence_number(self) -> int:
        if self.last is None:
            return 0
        try:
            number = orjson.loads(self.last).get("sequence_number")
        except (orjson.JSONDecodeError, AttributeError):
            number = None
        if isinstance(number, int) and not isinstance(number, bool) and 0 <= number < INT64_MAX:
            return number + 1
        return 0  # an upstream that numbers no events (or beyond what clients read)

    def produced_texts(self):
        by_item: dict = {}
        for _, data in self.kept:
            try:
                event = orjson.loads(data)
                if isinstance(event.get("delta"), str):
                    key = (event.get("item_id"), event.get("output_index"))
                    by_item.setdefault(key, []).append(event["delta"])
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                continue
        return ["".join(parts) for parts in by_item.values()]

    def prompt_tokens(self):
        return tokens.responses_prompt_tokens(self.payload, self.model)


_SEARCH_ITEM = f'"{HOSTED_SEARCH}"'.encode()  # read only the item events that may be one

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,256}")


def _identifier(value) -> str | None:
    """An upstream's error `code` or `param` as relayed: a plain identifier, else None."""
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None


def _type_of(data: bytes) -> bytes | None:
    if b'"type"' not in data:
        return None
    try:
        kind = orjson.loads(data).get("type")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return kind.encode() if isinstance(kind, str) else None


@dataclass
class ProviderStream:
    """An open upstream SSE answer, handed from the provider call to the pipeline."""

    response: Any  # httpx.Response, or providers.pool.StreamedAnswer
    protocol: SSEProtocol
    # The adapter's decoder into the contract's events (providers.events); None: the upstream
    # speaks them already and is split as it comes (SSEDecoder).
    decoder: DecoderFactory | None = None
    first: bytes = b""  # the upstream's first bytes, read by `prime`
    rest: Any = None  # the rest of `response.aiter_raw()` after them


async def prime(stream: ProviderStream) -> ProviderStream:
    """Wait for the upstream's first bytes before anything goes to the client: until then a
    stream that breaks, ends or stays silent past the time-out is a failed attempt, answered
    with a JSON error or retried on another connection (inference.failover), never an
    in-stream error."""
    chunks = stream.response.aiter_raw()
    try:
        first = b""
        while not first:
            first = await anext(chunks)
    except BaseException as exc:
        await _close(stream.response)
        if isinstance(exc, StopAsyncIteration):
            raise unavailable("stream ended before its first byte", "connection") from None
        if isinstance(exc, StreamTooLarge):
            raise unavailable(f"{exc} before its first event", "too_large") from exc
        if isinstance(exc, httpx.TimeoutException):
            raise unavailable("stream silent past the time-out", "timeout") from exc
        if isinstance(exc, httpx.HTTPError):
            raise unavailable(f"stream broke before its first byte: {exc}", "connection") from exc
        raise
    stream.first, stream.rest = first, chunks
    return stream


async def _close(response: Any) -> None:
    try:
        await response.aclose()
    except Exception:  # closing a broken answer: nothing left to save
        logger.debug("closing a failed stream raised", exc_info=True)


_END = None
_background: set[asyncio.Task] = set()  # grace reads after a disconnect (tests wait on it)
# Streams not yet `finished` (tests wait on them too: a stream the client gave up on may end on
# the server after the test is done, and its ledger write must land before the flush).
_open: set[_Upstream] = set()


class _Upstream:
    """Reads the upstream into a queue on a task of its own."""

    def __init__(self, stream: ProviderStream):
        self.stream = stream
        self.outcome = StreamOutcome()
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.client_gone = False
        self.ended = False  # the relay has its last event (END is queued)
        self.relay_started = False
        self.usage_seen = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        max_event = settings.GATEWAY["ANSWER_MAX_BYTES"]["event"]
        decoder = SSEDecoder if stream.decoder is None else stream.decoder
        self.decoder = decoder(max_event)
        # The bytes `prime` read are decoded now, so the relay finds their events queued and
        # sends the first one in the same turn of the loop as the headers: handed over by the
        # reading task, it waited two more turns, each behind every other stream's work.
        self.read_on = self._first()
        self.task = self.loop.create_task(self._read())

    def _first(self) -> bool:
        """Takes the primed bytes; False when they ended the stream or failed it."""
        first = self.stream.first
        return self._decode(first) if first else True

    def _decode(self, chunk: bytes | None) -> bool:
        """Decodes one chunk (None: the decoder's rest at the upstream's end) and queues its
        events; False when they ended the stream or failed it. Every decoding error ends the
        stream here, with its error event and a 503, whichever chunk it came from."""
        try:
            decoder = self.decoder
            return self._take(decoder.feed(chunk) if chunk is not None else decoder.flush())
        except (EventTooLarge, StreamBroken) as exc:
            logger.warning("stream broke: %s", type(exc).__name__)
        except Exception:  # an adapter's decoder on bytes it did not expect: the same answer
            logger.exception("decoding a stream failed")
        self._fail(SERVICE_UNAVAILABLE)
        return False

    def _send(self, data: bytes | None) -> None:
        if not self.client_gone and not self.ended:
            self.queue.put_nowait(data)

    def _end(self) -> None:
        self._send(_END)
        self.ended = True

    def _fail(self, message: str) -> None:
        if self.ended:  # after the upstream's own end marker: the client has its answer
            logger.warning("upstream failed after the end of its stream: %s", message)
            return
        self.outcome.status, self.outcome.failure = 503, message
        self._send(self.stream.protocol.error_event(message))

    async def _read(self) -> None:
        stream = self.stream
        decode = self._decode
        try:
            if not self.read_on:
                return
            chunks = stream.rest if stream.rest is not None else stream.response.aiter_raw()
            async for chunk in chunks:
                if not decode(chunk):
                    return
            if decode(None) and not self.outcome.completed:
                self._fail(SERVICE_UNAVAILABLE)
        except (httpx.HTTPError, EventTooLarge, StreamBroken) as exc:  # connection, adapter reader
            logger.warning("stream broke: %s", type(exc).__name__)
            self._fail(SERVICE_UNAVAILABLE)
        except Exception:  # an adapter's own reader failing: the same answer, never a lost task
            logger.exception("reading a stream failed")
            self._fail(SERVICE_UNAVAILABLE)
        finally:
            response = self.stream.response
            await response.aclose()
            if isinstance(response, httpx.Response):
                # httpx's response and its stream refer to each other: a cycle of ~45 objects
                # per stream left to the cyclic garbage collector (gateway_site.asgi).
                response.stream = httpx.ByteStream(b"")
            self._end()

    def _take(self, blocks: list[bytes]) -> bool:
        protocol, outcome = self.stream.protocol, self.outcome
        if blocks and not outcome.first_event_at:
            outcome.first_event_at = time.perf_counter()
        for block in blocks:
            out = protocol.inspect(block, outcome)
            if outcome.usage is not None:
                self.usage_seen.set()
            if out is None:
                self._fail(outcome.failure or SERVICE_UNAVAILABLE)
                return False
            self._send(out)
            if outcome.completed and not self.ended:
                # The relay ends with the end marker, in the same step: a client that hangs up
                # once it has it (as the openai SDK does at [DONE]) got a complete stream. The
                # upstream is still read to its end, for its connection's reuse.
                self._end()
        return True

    def client_left(self, finished: Callable) -> None:
        self.client_gone = True
        grace = settings.GATEWAY["STREAM_USAGE_GRACE"]
        task = self.loop.create_task(self.settle_disconnect(grace, finished))
        _background.add(task)
        task.add_done_callback(_background.discard)

    def never_relayed(self, finished: Callable) -> None:
        """The relay was dropped unstarted: the client left between the response's headers
        and its first byte (the server never iterated the body)."""
        if not self.relay_started:
            try:
                self.loop.call_soon_threadsafe(self.client_left, finished)
            except RuntimeError:  # the loop is gone (shutdown)
                logger.warning("stream dropped unstarted at shutdown; no ledger row")

    async def settle_disconnect(self, grace: float, finished: Callable) -> None:
        """The client left: read on (unsent) until the usage event, the end, or `grace`."""
        outcome = self.outcome
        try:
            if outcome.usage is None and not self.task.done():
                usage = asyncio.ensure_future(self.usage_seen.wait())
                await asyncio.wait({self.task, usage}, timeout=grace)
                usage.cancel()
            if not self.task.done():
                self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            if outcome.failure is None:
                outcome.status = 499
                if outcome.usage is None:
                    outcome.usage = await asyncio.to_thread(self.stream.protocol.estimate)
                    outcome.estimated = outcome.usage is not None
        except Exception:
            logger.exception("settling a left stream failed; recorded without usage")
            outcome.status = 499
        finally:
            finished(outcome)


def relay(
    stream: ProviderStream, finished: Callable[[StreamOutcome], None]
) -> AsyncIterator[bytes]:
    """The upstream's events, read from now on; `finished` is told how the stream ended
    (always, exactly once, even when the body is never iterated)."""
    upstream = _Upstream(stream)
    _open.add(upstream)

    def done(outcome: StreamOutcome) -> None:
        try:
            finished(outcome)  # its ledger write is in `pipeline._background` before this is not
        finally:
            _open.discard(upstream)

    events = _relay(upstream, done)
    weakref.finalize(events, upstream.never_relayed, done)
    return events


async def _relay(upstream: _Upstream, finished: Callable) -> AsyncIterator[bytes]:
    upstream.relay_started = True
    queue = upstream.queue
    try:
        ended = False
        while not ended and (data := await queue.get()) is not _END:
            # Events that arrived together (a provider often sends several deltas in one
            # segment) go to the client in one write: per write, the server's framing and a
            # system call cost more than the event's own bytes.
            while not queue.empty():
                more = queue.get_nowait()
                if more is _END:
                    ended = True
                    break
                data += more
            yield data
    except BaseException:  # the client went away (CancelledError / GeneratorExit)
        upstream.client_left(finished)
        raise
    finished(upstream.outcome)

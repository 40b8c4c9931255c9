"""The contract's streamed events, and how an adapter that speaks another wire format makes them.

The stream relay (inference.streaming) sees only the contract's server-sent events: Chat
Completions chunks (`data: {...}` ... `data: [DONE]`) or Responses events (`event: NAME`,
`data: {...}`). An upstream that speaks them already (OpenAI, OpenRouter, an OpenAI-compatible
server) is relayed as it arrives, split into events by `SSEDecoder`. An upstream with a wire
format of its own (Anthropic's SSE events, Bedrock's binary event-stream, Gemini's SSE of
`GenerateContentResponse`s) comes with a `TranslatingDecoder`: its frames (`Frames`: SSE or the
provider's binary framing) are each handed to the adapter's `EventTranslator`, which answers
the contract's events for it. A translator writes chat chunks with `ChatChunks`, so every
adapter's chunks have one shape; usage goes into the contract's `usage` (`contract_usage`).

A translator that cannot read an upstream event raises `StreamBroken`: the relay then sends
the contract's in-stream error (a broken stream, 503) and records the request, as it does for
a connection that breaks. A provider's own in-stream error event becomes the contract's
error chunk (`ChatChunks.error`), whose message the relay sanitizes and relays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from core import clock

BOM = b"\xef\xbb\xbf"


class EventTooLarge(Exception):
    """An upstream event still incomplete past the decoder's cap."""


class SSEDecoder:
    """Splits a byte stream into SSE events (each ending in a blank line) the moment each is
    complete. Lines may end in CRLF, LF or CR (the standard allows all three, mixed); they are
    relayed as LF. A CR at the end of a chunk waits for the next one (it may be half a CRLF).
    An event still incomplete past `max_event` bytes is EventTooLarge: what is held of one
    event is bounded (docs/decisions/README.md, "Upstream bounds")."""

    def __init__(self, max_event: int | None = None):
        self.buffer = b""
        self.started = False
        self.pending_cr = False
        self.max_event = max_event

    def feed(self, chunk: bytes) -> list[bytes]:
        if not self.started and chunk:
            self.started = True
            chunk = chunk.removeprefix(BOM)
        if self.pending_cr:
            chunk, self.pending_cr = b"\r" + chunk, False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk, self.pending_cr = chunk[:-1], True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self.buffer + chunk if self.buffer else chunk
        blocks = []
        while True:
            buffer = buffer.lstrip(b"\n")  # blank lines between events dispatch nothing
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            blocks.append(buffer[: end + 2])
            buffer = buffer[end + 2 :]
        if self.max_event is not None and len(buffer) > self.max_event:
            raise EventTooLarge(f"event over {self.max_event} bytes")
        self.buffer = buffer
        return blocks

    def flush(self) -> list[bytes]:
        """What is left when the upstream closes: relayed as a last event (lenient: a final
        usage event without its blank line is still billed)."""
        rest = self.buffer.strip(b"\n")
        self.buffer = b""
        return [rest + b"\n\n"] if rest else []


def parse_event(block: bytes) -> tuple[bytes | None, bytes | None]:
    """(event name, data) of one event block; fields may come in any order, comments (`:`)
    and `id:`/`retry:` lines are skipped. data is None when the block has no `data:` line."""
    if block.startswith(b"data: ") and block.find(b"\n") == len(block) - 2:
        return None, block[6:-2]  # the common case: one data line
    if block.startswith(b"event: "):  # the next most common: a name, then one data line
        end = block.find(b"\n")
        if block.startswith(b"data: ", end + 1) and block.find(b"\n", end + 1) == len(block) - 2:
            return block[7:end], block[end + 7 : -2]
    event = None
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value
    return event, b"\n".join(data) if data else None


class StreamBroken(Exception):
    """An upstream event a translator cannot read (garbage, a wrong shape)."""


class EventDecoder(Protocol):
    """Bytes in, the contract's complete SSE events out (each ending in a blank line)."""

    def feed(self, chunk: bytes) -> list[bytes]: ...

    def flush(self) -> list[bytes]: ...


class Frames(Protocol):
    """An upstream's framing: bytes in, `(event name or None, data)` of each complete frame."""

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]: ...

    def flush(self) -> list[tuple[bytes | None, bytes]]: ...


class DecodedFrames:
    """The events of a decoder as frames (`parse_event`); comments, keep-alives and blocks
    without data are dropped. Over an adapter's decoder: its contract chunks translated again
    (providers.bridge)."""

    def __init__(self, decoder: EventDecoder):
        self.decoder = decoder

    @staticmethod
    def _frames(blocks: list[bytes]) -> list[tuple[bytes | None, bytes]]:
        frames = []
        for block in blocks:
            name, data = parse_event(block)
            if data is not None:
                frames.append((name, data))
        return frames

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        return self._frames(self.decoder.feed(chunk))

    def flush(self) -> list[tuple[bytes | None, bytes]]:
        return self._frames(self.decoder.flush())


class SSEFrames(DecodedFrames):
    """Server-sent events as frames (Anthropic, Gemini)."""

    def __init__(self, max_event: int | None = None):
        super().__init__(SSEDecoder(max_event))


class EventTranslator(Protocol):
    """One stream's translation into the contract's events (an adapter's, one per stream)."""

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        """The contract's events for one upstream frame (none, one or several)."""
        ...

    def end(self) -> list[bytes]:
        """The contract's last events when the upstream closed (e.g. the usage chunk and
        `[DONE]` of a protocol whose stream simply ends); [] when it already ended them."""
        ...


class TranslatingDecoder:
    """An `EventDecoder` over an upstream's frames and an adapter's translator."""

    def __init__(self, frames: Frames, translator: EventTranslator):
        self.frames = frames
        self.translator = translator

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        for name, data in self.frames.feed(chunk):
            out += self.translator.event(name, data)
        return out

    def flush(self) -> list[bytes]:
        out: list[bytes] = []
        for name, data in self.frames.flush():
            out += self.translator.event(name, data)
        return out + self.translator.end()


DecoderFactory = Callable[[int], EventDecoder]  # given the event cap (bytes), a new decoder


def loads_frame(data: bytes) -> dict:
    """One upstream frame's JSON object, else `StreamBroken`."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StreamBroken("an upstream event is not JSON") from exc
    if not isinstance(value, dict):
        raise StreamBroken("an upstream event is not a JSON object")
    return value


# --- the contract's usage and chat shapes ------------------------------------------------------


def contract_usage(
    *,
    prompt: int,
    completion: int,
    cached: int = 0,
    cache_write: int = 0,
    reasoning: int = 0,
) -> dict:
    """The contract's Chat Completions `usage`: `prompt` counts every input token (cached
    reads and cache writes included, as OpenAI counts them); `completion` every output token
    (reasoning included). `cache_write_tokens` is OpenRouter's name for the tokens a provider
    bills at its cache-write price (Anthropic, Bedrock); billing reads it
    (inference.billing, `cache_write_prompt`)."""
    prompt_details: dict[str, int] = {"cached_tokens": cached}
    if cache_write:
        prompt_details["cache_write_tokens"] = cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def chat_completion(
    *,
    answer_id: str,
    model: str,
    created: int,
    message: dict,
    finish_reason: str | None,
    usage: dict,
) -> dict:
    """The contract's non-streamed chat completion (one choice). `message` is the assistant's:
    `content` (a string or None), optionally `tool_calls` (`[{"id", "type": "function",
    "function": {"name", "arguments"}}]`), `refusal`, `reasoning_content`."""
    message = {"role": "assistant", "content": None, "refusal": None, **message}
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage,
    }


def now() -> int:
    """`created` of an answer whose provider gives no time (seconds since the epoch), on the
    injectable clock: a test freezes it rather than straddle a second."""
    return int(clock.now())


class ChatChunks:
    """The contract's Chat Completions chunks of one streamed answer, each a complete SSE event.

    Every chunk carries the answer's `id`, `created` and `model`, as OpenAI's do; a translator
    calls `text`, `reasoning`, `tool_call`, `tool_arguments`, `finish`, then `usage` and
    `done` (or `error` when the provider reports a failure inside its stream)."""

    def __init__(self, answer_id: str, model: str, created: int | None = None):
        self.answer_id = answer_id
        self.model = model
        self.created = now() if created is None else created
        self.role_sent = False

    def chunk(self, choices: list, **extra: Any) -> bytes:
        body = {
            "id": self.answer_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def _delta(self, delta: dict) -> bytes:
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        return self.chunk([{"index": 0, "delta": delta, "finish_reason": None}])

    def role(self) -> bytes:
        """The first chunk: the assistant's role and empty content (as OpenAI opens)."""
        return self._delta({"content": ""})

    def text(self, text: str) -> bytes:
        return self._delta({"content": text})

    def reasoning(self, text: str) -> bytes:
        return self._delta({"reasoning_content": text})

    def refusal(self, text: str) -> bytes:
        return self._delta({"refusal": text})

    def tool_call(self, index: int, call_id: str, name: str, arguments: str = "") -> bytes:
        """A tool call's first chunk: its id and name (and arguments if they came whole)."""
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        return self._delta({"tool_calls": [call]})

    def tool_arguments(self, index: int, arguments: str) -> bytes:
        return self._delta({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})

    def finish(self, reason: str) -> bytes:
        return self.chunk([{"index": 0, "delta": {}, "finish_reason": reason}])

    def usage(self, usage: dict) -> bytes:
        """The usage-only last chunk (`choices` empty), as OpenAI sends it with
        `stream_options.include_usage`."""
        return self.chunk([], usage=usage)

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    @staticmethod
    def error(message: str, kind: str = "server_error") -> bytes:
        """A provider's in-stream failure: the relay reads it, records the request as failed
        and sends the client the contract's error event (its message sanitized)."""
        return b"data: " + orjson.dumps({"error": {"message": message, "type": kind}}) + b"\n\n"

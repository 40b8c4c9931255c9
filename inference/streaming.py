"""Server-sent events relayed from a provider to the client as they arrive.

The upstream response is already open and its status checked (Transport.open_stream), so every
failure up to here was a normal JSON error. From the first byte on the status is 200, and a
failure is reported inside the stream, in the endpoint's own way (spec: Events):
- chat completions: `data: {"error": {"message", "type"}}` and then `data: [DONE]`;
- responses: `event: error` with `data: {"message"}`, and no `[DONE]`.
Usage is picked out of the events on the way (the request is billed exactly like a
non-streamed one) and the ledger row is written once the stream ends, whatever way it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import orjson

from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE

from .billing import Usage
from .providers.base import sanitize_message

logger = logging.getLogger("gateway")


async def sse_blocks(response: httpx.Response) -> AsyncIterator[bytes]:
    """Complete SSE events (each ending in a blank line), as soon as each has arrived."""
    buffer = b""
    async for chunk in response.aiter_raw():
        buffer += chunk
        if b"\r\n" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            block, buffer = buffer[: end + 2], buffer[end + 2 :]
            yield block
    if buffer.strip():
        yield buffer + b"\n\n"


def event_name(block: bytes) -> bytes | None:
    if block.startswith(b"event:"):
        return block[6 : block.find(b"\n")].strip()
    return None


def event_data(block: bytes) -> bytes:
    """The concatenated `data:` lines of an event."""
    lines = [line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines)


@dataclass
class StreamOutcome:
    usage: Usage | None = None
    completed: bool = False  # the upstream's own end-of-stream marker was seen
    failure: str | None = None  # message sent to the client when the stream broke
    status: int = 200


class SSEProtocol:
    """How one endpoint's events are read and how a failure is told."""

    def inspect(self, block: bytes, outcome: StreamOutcome) -> bytes | None:
        """Note usage/completion; return the bytes to send (None: the upstream failed)."""
        raise NotImplementedError

    def error_event(self, message: str) -> bytes:
        raise NotImplementedError


def _chat_usage(usage: dict) -> Usage:
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        total_tokens=int(usage.get("total_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def _responses_usage(usage: dict) -> Usage:
    details = usage.get("input_tokens_details") or {}
    return Usage(
        prompt_tokens=int(usage.get("input_tokens") or 0),
        completion_tokens=int(usage.get("output_tokens") or 0),
        total_tokens=int(usage.get("total_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


class ChatSSE(SSEProtocol):
    def inspect(self, block, outcome):
        data = event_data(block)
        if data == b"[DONE]":
            outcome.completed = True
            return block
        if b'"usage"' in data or b'"error"' in data:
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                return block
            if isinstance(chunk, dict):
                if chunk.get("error"):
                    error = chunk["error"] if isinstance(chunk["error"], dict) else {}
                    outcome.failure = sanitize_message(str(error.get("message") or PROVIDER_ERROR))
                    return None
                if isinstance(chunk.get("usage"), dict):
                    outcome.usage = _chat_usage(chunk["usage"])
        return block

    def error_event(self, message):
        body = {"error": {"message": message, "type": "server_error"}}
        return b"data: " + orjson.dumps(body) + b"\n\ndata: [DONE]\n\n"


class ResponsesSSE(SSEProtocol):
    FINAL = {b"response.completed", b"response.incomplete", b"response.failed"}

    def inspect(self, block, outcome):
        name = event_name(block)
        if name == b"error":
            try:
                error = orjson.loads(event_data(block))
            except orjson.JSONDecodeError:
                error = {}
            message = error.get("message") if isinstance(error, dict) else None
            outcome.failure = sanitize_message(str(message or PROVIDER_ERROR))
            return None
        if name in self.FINAL:
            outcome.completed = True
            try:
                response = orjson.loads(event_data(block)).get("response") or {}
            except (orjson.JSONDecodeError, AttributeError):
                response = {}
            if isinstance(response.get("usage"), dict):
                outcome.usage = _responses_usage(response["usage"])
        return block

    def error_event(self, message):
        # `type` lets the openai SDK read it as its ResponseErrorEvent.
        data = orjson.dumps({"type": "error", "message": message})
        return b"event: error\ndata: " + data + b"\n\n"


@dataclass
class ProviderStream:
    """An open upstream SSE answer, handed from the provider call to the pipeline."""

    response: httpx.Response
    protocol: SSEProtocol


async def relay(
    stream: ProviderStream, finished: Callable[[StreamOutcome], None]
) -> AsyncIterator[bytes]:
    """Yield the upstream's events; tell `finished` how it ended (always, exactly once)."""
    outcome = StreamOutcome()
    protocol = stream.protocol
    try:
        async for block in sse_blocks(stream.response):
            out = protocol.inspect(block, outcome)
            if out is None:
                outcome.status = 503
                yield protocol.error_event(outcome.failure or SERVICE_UNAVAILABLE)
                return
            yield out
        if not outcome.completed:
            outcome.status, outcome.failure = 503, SERVICE_UNAVAILABLE
            yield protocol.error_event(SERVICE_UNAVAILABLE)
    except httpx.HTTPError as exc:
        logger.warning("stream broke: %s", type(exc).__name__)
        outcome.status, outcome.failure = 503, SERVICE_UNAVAILABLE
        yield protocol.error_event(SERVICE_UNAVAILABLE)
    except (asyncio.CancelledError, GeneratorExit):
        outcome.status = 499  # the client went away: the upstream request is closed below
        raise
    finally:
        await stream.response.aclose()
        finished(outcome)

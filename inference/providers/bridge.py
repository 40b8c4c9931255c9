"""`/v1/responses` through a provider's chat API, for every kind without a Responses API of its
own (Anthropic, Bedrock Converse, Gemini, an OpenAI-compatible server without one).

Stateless, in the contract's shapes on both sides: the Responses request becomes the contract's
chat request (`responses_to_chat`), the adapter's `chat` / `chat_stream` make the call in their
own wire format, and the contract's chat answer or chunks become the Responses answer or events
(`chat_to_response`, `ChatToResponsesEvents`). `previous_response_id` and `item_reference` stay
the spec's 400 (`stateful_responses = False`); docs/decisions/providers.md says what maps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from catalog.routing import Route

from .base import UpstreamStream
from .events import EventDecoder, EventTranslator, TranslatingDecoder, parse_event


class DecodedFrames:
    """The contract's chat events of an inner decoder, as frames for a second translation."""

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


def responses_to_chat(payload: dict) -> dict:
    """The contract's chat request for a Responses request (stream flags included)."""
    raise NotImplementedError


def chat_to_response(answer: dict, request: dict) -> dict:
    """The contract's Responses object for a chat completion answering `request`."""
    raise NotImplementedError


class ChatToResponsesEvents:
    """Contract chat chunks in, the contract's Responses events out (one stream)."""

    def __init__(self, request: dict):
        self.request = request

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        raise NotImplementedError

    def end(self) -> list[bytes]:
        raise NotImplementedError


def _translator(request: dict) -> EventTranslator:
    return ChatToResponsesEvents(request)


class ResponsesOverChat:
    """Mixin of an adapter with `chat` and `chat_stream`: `/v1/responses` through them."""

    stateful_responses: ClassVar[bool] = False
    # What a translated answer can honour: encrypted reasoning is asked by agents (Codex) and
    # is simply absent from the answer (the Responses API's own rule when there is none).
    responses_include: ClassVar[frozenset[str] | None] = frozenset({"reasoning.encrypted_content"})

    if TYPE_CHECKING:  # the adapter's own (ChatProvider)

        async def chat(self, route: Route, payload: dict) -> dict: ...

        async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream: ...

        def check_chat(self, route: Route, payload: dict) -> None: ...

    def check_responses(self, route: Route, payload: dict) -> None:
        """What the chat call would refuse, refused before it (step 7)."""
        self.check_chat(route, responses_to_chat(payload))

    async def responses(self, route: Route, payload: dict) -> dict:
        answer = await self.chat(route, responses_to_chat(payload))
        return chat_to_response(answer, payload)

    async def responses_stream(self, route: Route, payload: dict) -> UpstreamStream:
        opened = await self.chat_stream(route, responses_to_chat(payload))
        inner = opened.decoder

        def decoder(max_event: int) -> EventDecoder:
            from .events import SSEDecoder

            chat_events: Any = SSEDecoder(max_event) if inner is None else inner(max_event)
            return TranslatingDecoder(DecodedFrames(chat_events), _translator(payload))

        return UpstreamStream(opened.response, decoder)

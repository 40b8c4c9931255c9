"""Token estimates for a stream the client left before the provider's usage arrived.

Used only then (never on a stream that ends normally, which is billed from the provider's own
usage). OpenAI-family models are counted with their real BPE encodings (`bpe_openai`, which
ships o200k_base and cl100k_base in its wheel: nothing is downloaded at run time); the prompt
follows OpenAI's published chat formula. Other models get ceil(characters / 4).

The prompt estimate (docs/decisions/README.md, "A client that leaves a stream pays for
what the provider produced"): every message costs its text's tokens plus 3 (plus 1
when it carries a `name`), and the reply is primed with 3 more. Text parts count as text; an
image part counts 85 tokens (a low-detail image: the detail and size that decide the real
figure are the provider's to know); audio, video and file parts count 0; tool definitions
and tool calls count the tokens of their JSON. It matches the provider's count for plain
text messages and is below it for images and tools.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable

import orjson

logger = logging.getLogger("gateway")

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_PART = 85
SLICE = 50_000  # characters encoded at once (the encoder refuses very long inputs)

# A model name with no encoding: every text counted as ceil(characters / 4), at no cost. What a
# budget hold counts a prompt with (inference.pipeline): exact BPE costs 50-150 ns a character
# of new text, half a millisecond for a long chat history, on every request.
ROUGH = ""
# Up to this many characters an embeddings request's hold is counted exactly (its cost is known
# before the call, and exactly is what makes "30 at once answer 10" hold); beyond, roughly.
EXACT_HOLD_CHARS = 16_384

# Longest prefix first: `gpt-4o` before `gpt-4`.
_O200K = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "gpt-oss", "o1", "o3", "o4")
_CL100K = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")


def encoding_name(model: str) -> str | None:
    """The encoding of an OpenAI-family model id (an aggregator's `openai/` prefix allowed)."""
    name = model.lower().removeprefix("openai/")
    if name.startswith(_O200K):
        return "o200k_base"
    if name.startswith(_CL100K):
        return "cl100k_base"
    return None


@functools.cache
def _encoding(name: str):
    import bpe_openai  # loaded on the first disconnect, not at start-up

    return bpe_openai.get_encoding(name)


def count_text(text: str, model: str) -> int:
    if not text:
        return 0
    name = encoding_name(model)
    if name is None:
        return math.ceil(len(text) / 4)
    try:
        encoding = _encoding(name)
        return sum(
            len(encoding.encode_ordinary(text[i : i + SLICE])) for i in range(0, len(text), SLICE)
        )
    except Exception:  # an estimate must never break the ledger write
        logger.exception("token count failed for %s; using characters / 4", model)
        return math.ceil(len(text) / 4)


def _part_tokens(part, model: str) -> int:
    if isinstance(part, str):
        return count_text(part, model)
    if not isinstance(part, dict):
        return 0
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        return IMAGE_PART
    text = part.get("text", part.get("refusal"))
    return count_text(text, model) if isinstance(text, str) else 0


def _content_tokens(content, model: str) -> int:
    if isinstance(content, str):
        return count_text(content, model)
    if isinstance(content, list):
        return sum(_part_tokens(part, model) for part in content)
    return 0


def _json_tokens(value, model: str) -> int:
    if value is None:
        return 0
    return count_text(orjson.dumps(value).decode(), model)


def _message_tokens(message: dict, model: str) -> int:
    tokens = PER_MESSAGE + _content_tokens(message.get("content"), model)
    if message.get("name"):
        tokens += PER_NAME + count_text(str(message["name"]), model)
    tokens += _json_tokens(message.get("tool_calls"), model)
    return tokens


def chat_prompt_tokens(payload: dict, model: str) -> int:
    """The prompt of a Chat Completions body, as sent upstream."""
    messages = [m for m in payload.get("messages") or () if isinstance(m, dict)]
    return (
        sum(_message_tokens(m, model) for m in messages)
        + REPLY_PRIMING
        + _json_tokens(payload.get("tools"), model)
    )


def responses_prompt_tokens(payload: dict, model: str) -> int:
    """The prompt of a Responses body: `instructions` as a system message, then each input
    item as a message (a tool output or call counts its text or JSON)."""
    tokens = REPLY_PRIMING + _json_tokens(payload.get("tools"), model)
    if isinstance(payload.get("instructions"), str):
        tokens += PER_MESSAGE + count_text(payload["instructions"], model)
    items = payload.get("input")
    if isinstance(items, str):
        return tokens + PER_MESSAGE + count_text(items, model)
    for item in items or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") in (None, "message"):
            tokens += _message_tokens(item, model)
        elif isinstance(item.get("output"), str | list):
            tokens += PER_MESSAGE + _content_tokens(item["output"], model)
        else:
            tokens += PER_MESSAGE + _json_tokens(item, model)
    return tokens


def completion_tokens(texts: Iterable[str], model: str) -> int:
    """What the provider produced, from the text of its deltas (one text per choice/item)."""
    return sum(count_text(text, model) for text in texts)

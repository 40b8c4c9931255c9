"""Token usage as each wire format reports it: one parser per format, used everywhere.

OpenRouter speaks OpenAI's shapes (chat, responses, embeddings) and is read by the same
parsers. A usage block that is there but malformed is a malformed provider answer (500); a
missing one reads as zeros (the stream or answer is then billed at what it reports).
"""

from __future__ import annotations

from catalog.models import HOSTED_SEARCH

from ..billing import Usage
from .base import malformed


def _tokens(value) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise malformed(f"token count {value!r}")
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise malformed(f"token count {value!r}") from exc
    if count < 0:
        raise malformed(f"token count {value!r}")
    return count


def _block(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise malformed(f"{what} is {type(value).__name__}")
    return value


def openai_chat(usage) -> Usage:
    """Chat Completions `usage` (also the usage-only last chunk of a stream): OpenAI's, and the
    contract's that every adapter writes (`events.contract_usage`; `cache_write_tokens` is
    OpenRouter's and ours, for providers that bill cache writes)."""
    usage = _block(usage, "usage")
    details = _block(usage.get("prompt_tokens_details"), "prompt_tokens_details")
    written = details.get("cache_write_tokens")
    return Usage(
        prompt_tokens=_tokens(usage.get("prompt_tokens")),
        completion_tokens=_tokens(usage.get("completion_tokens")),
        total_tokens=_tokens(usage.get("total_tokens")),
        cached_tokens=_tokens(details.get("cached_tokens")),
        cache_write_tokens=_tokens(written) if written is not None else None,
    )


def openai_responses(usage, output=None) -> Usage:
    """Responses API `usage` (also in a stream's `response.completed` event); the bridge
    (providers.bridge) carries cache writes as `input_tokens_details.cache_write_tokens`.
    `output`, the answer's output items: its hosted web searches are `units`."""
    usage = _block(usage, "usage")
    searches = hosted_searches(output)
    details = _block(usage.get("input_tokens_details"), "input_tokens_details")
    written = details.get("cache_write_tokens")
    return Usage(
        prompt_tokens=_tokens(usage.get("input_tokens")),
        completion_tokens=_tokens(usage.get("output_tokens")),
        total_tokens=_tokens(usage.get("total_tokens")),
        cached_tokens=_tokens(details.get("cached_tokens")),
        cache_write_tokens=_tokens(written) if written is not None else None,
        units=searches or None,
    )


def hosted_searches(output) -> int:
    """The hosted web searches in a Responses answer's `output`: its `web_search_call` items,
    each one a search the provider bills, whatever its status or action."""
    if not isinstance(output, list):
        return 0
    return sum(1 for item in output if isinstance(item, dict) and item.get("type") == HOSTED_SEARCH)


def openai_embeddings(usage) -> Usage:
    usage = _block(usage, "usage")
    prompt = _tokens(usage.get("prompt_tokens"))
    return Usage(prompt_tokens=prompt, total_tokens=prompt)


def openai_images(usage) -> Usage | None:
    """The token-priced image model's `usage`; None when the answer carries no token counts."""
    if not isinstance(usage, dict) or usage.get("output_tokens") is None:
        return None
    prompt = _tokens(usage.get("input_tokens"))
    completion = _tokens(usage["output_tokens"])
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def gemini(metadata) -> Usage:
    """`usageMetadata` of generateContent; thinking tokens are billed as output."""
    metadata = _block(metadata, "usageMetadata")
    prompt = _tokens(metadata.get("promptTokenCount"))
    completion = _tokens(metadata.get("candidatesTokenCount")) + _tokens(
        metadata.get("thoughtsTokenCount")
    )
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def gemini_count(answer) -> int:
    """`:countTokens`' answer."""
    answer = _block(answer, "countTokens answer")
    if answer.get("totalTokens") is None:
        raise malformed("countTokens without totalTokens")
    return _tokens(answer["totalTokens"])


def bedrock_embeddings(answer: dict, headers) -> Usage:
    """Titan reports input tokens in the body, cohere only in a response header."""
    tokens = answer.get("inputTextTokenCount")
    if tokens is None:
        tokens = headers.get("x-amzn-bedrock-input-token-count")
    prompt = _tokens(tokens)
    return Usage(prompt_tokens=prompt, total_tokens=prompt)

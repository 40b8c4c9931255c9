"""`anthropic`: the Anthropic Messages API (`x-api-key`, `anthropic-version`; base URL like
https://api.anthropic.com/v1). Chat completions in its own wire format; `/v1/responses` through
it (providers.bridge)."""

from __future__ import annotations

from core.errors import BadRequest

from .base import Transport
from .bridge import ResponsesOverChat


class AnthropicTransport(ResponsesOverChat, Transport):
    kind = "anthropic"


# Reasoning effort -> Claude's extended-thinking budget (tokens), for Claude on every provider
# (Anthropic's Messages API and Bedrock's Converse take the same `thinking` object). The API's
# minimum is 1,024; the budget is kept below max_tokens (`claude_thinking`).
CLAUDE_THINKING_BUDGETS = {"low": 1024, "medium": 2048, "high": 4096}
THINKING_MIN_BUDGET = 1024


def claude_thinking(effort: str | None, max_tokens: int) -> dict | None:
    """Claude's `thinking` for a reasoning effort (None: no thinking, for no effort or `none`):
    the effort's budget, lowered to stay below `max_tokens` (which bounds thinking and answer
    together, as OpenAI's `max_completion_tokens` bounds reasoning and answer); the spec's 400
    when that leaves less than the API's minimum budget."""
    if effort is None or effort == "none":
        return None
    budget = CLAUDE_THINKING_BUDGETS.get(effort)
    if budget is None:
        raise BadRequest(f"Model does not support reasoning effort '{effort}'")
    budget = min(budget, max_tokens - 1)
    if budget < THINKING_MIN_BUDGET:
        raise BadRequest(
            f"'max_tokens' must be more than {THINKING_MIN_BUDGET} with reasoning effort "
            f"'{effort}' on this provider (its thinking budget is at least "
            f"{THINKING_MIN_BUDGET} tokens)"
        )
    return {"type": "enabled", "budget_tokens": budget}

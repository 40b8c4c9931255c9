"""`anthropic`: the Anthropic Messages API (`x-api-key`, `anthropic-version`; base URL like
https://api.anthropic.com/v1). Chat completions in its own wire format; `/v1/responses` through
it (providers.bridge)."""

from __future__ import annotations

from .base import Transport
from .bridge import ResponsesOverChat


class AnthropicTransport(ResponsesOverChat, Transport):
    kind = "anthropic"


# The thinking budget (`budget_tokens`) of each reasoning effort, for Claude on every provider
# (Anthropic's API and Bedrock's Converse take the same `thinking` object).
CLAUDE_THINKING_BUDGETS = {"low": 1024, "medium": 2048, "high": 4096}

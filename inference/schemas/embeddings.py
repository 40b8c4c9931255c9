from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_core import PydanticKnownError

from .common import ModelId, PositiveInt64, StrictBody

# OpenAI's own cap on `input` items; an aggregator or a self-hosted upstream may have none, and
# each item is a vector parsed and re-serialised here (docs/decisions/README.md, "Upstream bounds").
MAX_INPUT_ITEMS = 2048


def _at_most_max_items(value):
    """Counted before the items are validated (a 300,000-item list is refused at its length),
    as one `too_long` at `["body", "input"]`, not one error per branch of the union."""
    if isinstance(value, list) and len(value) > MAX_INPUT_ITEMS:
        context = {"field_type": "List", "max_length": MAX_INPUT_ITEMS, "actual_length": len(value)}
        raise PydanticKnownError("too_long", context)
    return value


class EmbeddingsRequest(StrictBody):
    model: ModelId = Field(description="Model identifier from the catalog")
    input: Annotated[
        str | Annotated[list[str], Field(min_length=1, max_length=MAX_INPUT_ITEMS)],
        BeforeValidator(_at_most_max_items),
    ] = Field(
        description="A string (one vector) or a non-empty list of at most 2,048 strings "
        "(one vector each)"
    )
    dimensions: PositiveInt64 | None = Field(
        default=None, description="Only text-embedding-3-small and -3-large"
    )
    encoding_format: Literal["float"] | None = Field(
        default="float", description="Only `float` is accepted"
    )
    user: str | None = Field(default=None, description="End-user id forwarded to the provider")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingItem(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float]


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    credits_used: int
    credits_remaining: int | None


class EmbeddingsResponse(BaseModel):
    object: Literal["list"]
    model: str
    data: list[EmbeddingItem]
    usage: EmbeddingsUsage

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from .common import ModelId, PositiveInt64, StrictBody


class EmbeddingsRequest(StrictBody):
    model: ModelId = Field(description="Model identifier from the catalog")
    input: str | Annotated[list[str], Field(min_length=1)] = Field(
        description="A string (one vector) or a non-empty list of strings (one vector each)"
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

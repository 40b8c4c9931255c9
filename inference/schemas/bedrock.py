"""POST /v1/bedrock/embeddings: the body of the upstream model family, chosen by model prefix.

The fields are the ones the cloud provider's `InvokeModel` takes for each family, plus
`model`; the body is forwarded without `model`. An unknown prefix is 422
`union_tag_not_found` at `["body"]`; an error inside a family's body carries the family tag
(`["body", "titan", "dimensions"]`).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from .common import ModelId, StrictBody

MODEL_PREFIXES = {"amazon.titan-": "titan", "cohere.": "cohere"}


class TitanEmbeddingsRequest(StrictBody):
    model: ModelId = Field(description="An `amazon.titan-` embeddings model id")
    inputText: str = Field(description="The text to embed")
    dimensions: Literal[256, 512, 1024] | None = Field(
        default=None, description="Output size (v2 models); the provider's default is 1024"
    )
    normalize: bool | None = Field(default=None, description="Unit-length vectors (v2 models)")
    embeddingTypes: list[Literal["float", "binary"]] | None = Field(
        default=None, description="Which encodings to return in `embeddingsByType`"
    )


class CohereEmbeddingsRequest(StrictBody):
    model: ModelId = Field(description="A `cohere.` embeddings model id")
    texts: list[str] = Field(description="The texts to embed, one vector each")
    input_type: Literal["search_document", "search_query", "classification", "clustering"]
    truncate: Literal["NONE", "START", "END"] | None = None
    embedding_types: list[Literal["float", "int8", "uint8", "binary", "ubinary"]] | None = None


def model_prefix(value: Any) -> str | None:
    """The union tag: the family whose prefix the `model` field starts with, else None."""
    model = value.get("model") if isinstance(value, dict) else getattr(value, "model", None)
    if not isinstance(model, str):
        return None
    for prefix, tag in MODEL_PREFIXES.items():
        if model.startswith(prefix):
            return tag
    return None


BedrockEmbeddingsRequest = Annotated[
    Annotated[TitanEmbeddingsRequest, Tag("titan")]
    | Annotated[CohereEmbeddingsRequest, Tag("cohere")],
    Discriminator(model_prefix),
]


class BedrockEmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    credits_used: int
    credits_remaining: int | None


class BedrockEmbeddingsResponse(BaseModel):
    """The upstream family's own answer (titan: `embedding`, `embeddingsByType`,
    `inputTextTokenCount`; cohere: `id`, `texts`, `embeddings`, `response_type`) plus usage."""

    model_config = ConfigDict(extra="allow")

    usage: BedrockEmbeddingsUsage

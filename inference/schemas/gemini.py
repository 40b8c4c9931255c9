"""POST /v1/gemini/embeddings: the embedding fields of the multimodal provider's API.

`input` is a string (sent to `:embedContent`) or a non-empty list of strings (sent to
`:batchEmbedContents`); the other fields are the provider's own, in snake case.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, Field, GetPydanticSchema, model_validator
from pydantic_core import core_schema

from .common import ModelId, PositiveInt64, StrictBody

TaskType = Literal[
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
]
NonEmptyText = Annotated[str, Field(min_length=1)]


def _text_input_schema(_source, _handler):
    # Labelled branches, so 422 locs read like /v1/embeddings': ["body", "input", "list[str]", 0].
    text = core_schema.str_schema(min_length=1, strict=True)
    return core_schema.union_schema(
        [(text, "str"), (core_schema.list_schema(text, min_length=1, strict=True), "list[str]")]
    )


TextInput = Annotated[str | list[str], GetPydanticSchema(_text_input_schema)]


class GeminiEmbeddingsRequest(StrictBody):
    model: ModelId = Field(description="An embeddings model id, e.g. gemini-embedding-001")
    input: TextInput = Field(
        description="A string (one vector, `:embedContent`) or a non-empty list of strings "
        "(one vector each, `:batchEmbedContents`). Empty strings are refused: the provider "
        "cannot embed them."
    )
    task_type: TaskType | None = Field(
        default=None, description="What the vectors are for; the provider's default if absent"
    )
    output_dimensionality: PositiveInt64 | None = Field(
        default=None, description="Truncate vectors to this size (the model's max applies)"
    )
    title: NonEmptyText | None = Field(
        default=None, description="Title of the document(s); only with task_type RETRIEVAL_DOCUMENT"
    )

    @model_validator(mode="after")
    def _title_needs_retrieval_document(self):
        if self.title is not None and self.task_type != "RETRIEVAL_DOCUMENT":
            raise ValueError("title is only allowed with task_type RETRIEVAL_DOCUMENT")
        return self

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)

    def options(self) -> dict:
        """The provider's per-request fields, in its own (camel case) names."""
        options: dict = {}
        if self.task_type is not None:
            options["taskType"] = self.task_type
        if self.title is not None:
            options["title"] = self.title
        if self.output_dimensionality is not None:
            options["outputDimensionality"] = self.output_dimensionality
        return options


class GeminiEmbedding(BaseModel):
    values: list[float]


class GeminiEmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    credits_used: int
    credits_remaining: int | None


class GeminiEmbeddingsResponse(BaseModel):
    """The provider's batch answer shape (`embeddings[].values`, one per input, in order) for
    both single and list input, plus the model and the gateway's usage."""

    model: str
    embeddings: list[GeminiEmbedding]
    usage: GeminiEmbeddingsUsage

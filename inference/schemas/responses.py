"""POST /v1/responses, strict: the public Responses API request shape, every object closed."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from .chat import Effort, ReasoningChoice
from .common import JSONObject, ModelId, PositiveInt64, StrictBody


class InputText(StrictBody):
    type: Literal["input_text"]
    text: str


class InputImage(StrictBody):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class InputFile(StrictBody):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class ResponseInputAudio(StrictBody):
    type: Literal["input_audio"]
    input_audio: dict[str, str]


class OutputText(StrictBody):
    type: Literal["output_text"]
    text: str
    annotations: list[JSONObject] | None = None


ContentPart = Annotated[
    InputText | InputImage | InputFile | ResponseInputAudio | OutputText,
    Field(discriminator="type"),
]
PART_MODALITY = {"input_image": "image", "input_file": "file", "input_audio": "audio"}


class ResponseMessage(StrictBody):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(StrictBody):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(StrictBody):
    type: Literal["function_call_output"]
    call_id: str
    output: str
    id: str | None = None
    status: str | None = None


class ItemReference(StrictBody):
    type: Literal["item_reference"]
    id: str


def _item_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("type") or "message"
    return getattr(value, "type", None) or "message"


InputItem = Annotated[
    Annotated[ResponseMessage, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]


class ResponseFunctionTool(StrictBody):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class ResponseInputSchemaTool(StrictBody):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    input_schema: JSONObject


class ResponseToolChoiceFunction(StrictBody):
    type: Literal["function"]
    name: str


class FormatText(StrictBody):
    type: Literal["text"]


class FormatJSONObject(StrictBody):
    type: Literal["json_object"]


class FormatJSONSchema(StrictBody):
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    schema_: JSONObject = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(StrictBody):
    format: (
        Annotated[FormatText | FormatJSONObject | FormatJSONSchema, Field(discriminator="type")]
        | None
    ) = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponseReasoning(StrictBody):
    effort: Effort
    exclude: bool | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponseRequest(ReasoningChoice, StrictBody):
    model: ModelId
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    max_output_tokens: PositiveInt64 | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool | None = None
    store: bool | None = None
    tools: list[ResponseFunctionTool | ResponseInputSchemaTool] | None = None
    tool_choice: Literal["auto", "required", "none"] | ResponseToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ResponseReasoning | None = None
    reasoning_effort: Effort | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None

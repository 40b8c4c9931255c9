"""POST /v1/responses, strict: the public Responses API request shape, every object closed.

`input` takes every item the Responses API answers with, as its public input shapes define
them, so that a stateless conversation goes on by sending the previous answer's `output` back:
messages (input parts, and an assistant's `output_text` with its `annotations` and `logprobs`,
and `refusal` parts), `reasoning` items, `function_call` and `function_call_output` (a string or
a list of input parts), and `item_reference`. The built-in tools' call items (web search, file
search, computer, code interpreter, MCP, shell, ...) are not accepted: the gateway takes only
function tools, so no answer it relays carries them (docs/decisions/README.md, "Responses `input`").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Discriminator, Field, Tag

from .chat import Effort, InputAudio, ReasoningChoice
from .common import Int64, JSONObject, ModelId, PositiveInt64, StrictBody

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class InputText(StrictBody):
    type: Literal["input_text"]
    text: str


class InputImage(StrictBody):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None


class InputFile(StrictBody):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class ResponseInputAudio(StrictBody):
    type: Literal["input_audio"]
    input_audio: InputAudio


# --- an assistant's answer: output_text (annotations, logprobs) and refusal -----------------


class FileCitation(StrictBody):
    type: Literal["file_citation"]
    file_id: str
    filename: str
    index: Int64


class URLCitation(StrictBody):
    type: Literal["url_citation"]
    url: str
    title: str
    start_index: Int64
    end_index: Int64


class ContainerFileCitation(StrictBody):
    type: Literal["container_file_citation"]
    container_id: str
    file_id: str
    filename: str
    start_index: Int64
    end_index: Int64


class FilePath(StrictBody):
    type: Literal["file_path"]
    file_id: str
    index: Int64


Annotation = Annotated[
    FileCitation | URLCitation | ContainerFileCitation | FilePath, Field(discriminator="type")
]
Byte = Annotated[int, Field(ge=0, le=255)]


class TopLogprob(StrictBody):
    token: str
    bytes: list[Byte]
    logprob: float


class Logprob(StrictBody):
    token: str
    bytes: list[Byte]
    logprob: float
    top_logprobs: list[TopLogprob]


class OutputText(StrictBody):
    type: Literal["output_text"]
    text: str
    annotations: list[Annotation] | None = None
    logprobs: list[Logprob] | None = None


class OutputRefusal(StrictBody):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[
    InputText | InputImage | InputFile | ResponseInputAudio | OutputText | OutputRefusal,
    Field(discriminator="type"),
]
# What a function's output may hold besides a string.
OutputPart = Annotated[InputText | InputImage | InputFile, Field(discriminator="type")]
PART_MODALITY = {"input_image": "image", "input_file": "file", "input_audio": "audio"}


class ResponseMessage(StrictBody):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None


# --- reasoning -------------------------------------------------------------------------------


class SummaryText(StrictBody):
    type: Literal["summary_text"]
    text: str


class ReasoningText(StrictBody):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(StrictBody):
    type: Literal["reasoning"]
    id: str
    summary: list[SummaryText]
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None


# --- function calls and their outputs --------------------------------------------------------


class CallerDirect(StrictBody):
    type: Literal["direct"]


class CallerProgram(StrictBody):
    type: Literal["program"]
    caller_id: str


Caller = Annotated[CallerDirect | CallerProgram, Field(discriminator="type")]


class FunctionCallItem(StrictBody):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None
    caller: Caller | None = None
    # The openai SDK serializes its own objects' `async` under their Python name, `async_`:
    # taken as `async` (and sent on as `async`), so that they go back in as they are.
    async_: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("async", "async_"),
        serialization_alias="async",
    )


class FunctionCallOutputItem(StrictBody):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[OutputPart]
    id: str | None = None
    status: ItemStatus | None = None
    name: str | None = None
    namespace: str | None = None
    caller: Caller | None = None


class ItemReference(StrictBody):
    type: Literal["item_reference"] | None = None
    id: str


def _item_kind(value: Any) -> str | None:
    """An item's tag: its `type`; without one a message, or a bare `{"id"}` item reference."""
    if isinstance(value, dict):
        kind = value.get("type")
        if kind is None and "id" in value and "role" not in value and "content" not in value:
            return "item_reference"
        return kind or "message"
    if isinstance(value, ItemReference):  # serializing a validated body
        return "item_reference"
    return getattr(value, "type", None) or "message"


InputItem = Annotated[
    Annotated[ResponseMessage, Tag("message")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]

# The Responses API's `include` values (the openai SDK's `ResponseIncludable`).
Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
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
    include: list[Includable] | None = None
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

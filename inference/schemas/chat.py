"""POST /v1/chat/completions, strict (v1.1 lockdown + multimodal chat).

The public Chat Completions request shape, with every object closed (`extra="forbid"`):
content parts are `text` and `image_url`, plus `input_audio`, `video_url` and `file`
(checked against the model's `input_modality`); tools in the function format or the
`name` + `input_schema` format; `reasoning` and `reasoning_effort` are mutually exclusive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from .common import Int64, JSONObject, ModelId, PositiveInt64, StrictBody

Effort = Literal["none", "low", "medium", "high"]


class TextPart(StrictBody):
    type: Literal["text"]
    text: str


class ImageURL(StrictBody):
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(StrictBody):
    type: Literal["image_url"]
    image_url: ImageURL


class InputAudio(StrictBody):
    data: str = Field(min_length=1, description="Base64 audio")
    format: Literal["wav", "mp3"]


class AudioPart(StrictBody):
    type: Literal["input_audio"]
    input_audio: InputAudio


class VideoURL(StrictBody):
    url: str = Field(min_length=1)


class VideoPart(StrictBody):
    type: Literal["video_url"]
    video_url: VideoURL


class FileData(StrictBody):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if not self.file_data and not self.file_id:
            raise ValueError("a file part needs file_data or file_id")
        return self


class FilePart(StrictBody):
    type: Literal["file"]
    file: FileData


UserPart = Annotated[
    TextPart | ImagePart | AudioPart | VideoPart | FilePart, Field(discriminator="type")
]

# Which content part needs which input modality of the model.
PART_MODALITY = {"image_url": "image", "input_audio": "audio", "video_url": "video", "file": "file"}


class FunctionCall(StrictBody):
    name: str
    arguments: str


class ToolCall(StrictBody):
    id: str
    type: Literal["function"]
    function: FunctionCall


class SystemMessage(StrictBody):
    role: Literal["system"]
    content: str | list[TextPart]
    name: str | None = None


class DeveloperMessage(StrictBody):
    role: Literal["developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(StrictBody):
    role: Literal["user"]
    content: str | Annotated[list[UserPart], Field(min_length=1)]
    name: str | None = None


class ChatURLCitation(StrictBody):
    start_index: Int64
    end_index: Int64
    title: str
    url: str


class ChatURLCitationAnnotation(StrictBody):
    type: Literal["url_citation"]
    url_citation: ChatURLCitation


class AssistantAudio(StrictBody):
    id: str


class AssistantMessage(StrictBody):
    """The documented assistant message, plus the `annotations` every answer's message carries:
    a client that appends the answer's message object itself (the openai docs' tool loop) sends
    them back, and the API takes them."""

    role: Literal["assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None
    annotations: list[ChatURLCitationAnnotation] | None = None
    audio: AssistantAudio | None = None
    function_call: FunctionCall | None = None


class ToolMessage(StrictBody):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(StrictBody):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class FunctionTool(StrictBody):
    type: Literal["function"]
    function: FunctionDefinition


class InputSchemaTool(StrictBody):
    """The `name` + `input_schema` tool format, sent upstream as a function tool."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    input_schema: JSONObject


class ToolChoiceFunctionName(StrictBody):
    name: str


class ToolChoiceFunction(StrictBody):
    type: Literal["function"]
    function: ToolChoiceFunctionName


class ResponseFormatText(StrictBody):
    type: Literal["text"]


class ResponseFormatJSONObject(StrictBody):
    type: Literal["json_object"]


class JSONSchema(StrictBody):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: JSONObject | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatJSONSchema(StrictBody):
    type: Literal["json_schema"]
    json_schema: JSONSchema


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema,
    Field(discriminator="type"),
]


class ChatReasoning(StrictBody):
    effort: Effort
    exclude: bool | None = None


class StreamOptions(StrictBody):
    include_usage: bool | None = None


class ReasoningChoice:
    """`reasoning` and `reasoning_effort` say the same thing: one or the other."""

    if TYPE_CHECKING:  # the fields of the models it is mixed into (chat's and responses')
        reasoning: Any
        reasoning_effort: Effort | None

    @model_validator(mode="after")
    def _exclusive_reasoning(self):
        if self.reasoning is not None and self.reasoning_effort is not None:
            raise ValueError("reasoning and reasoning_effort are mutually exclusive; send one")
        return self

    @property
    def effort(self) -> str | None:
        return self.reasoning.effort if self.reasoning is not None else self.reasoning_effort


class ChatCompletionRequest(ReasoningChoice, StrictBody):
    model: ModelId
    messages: list[Message] = Field(min_length=1)
    max_tokens: PositiveInt64 | None = None
    max_completion_tokens: PositiveInt64 | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    n: int | None = Field(default=None, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: Int64 | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[FunctionTool | InputSchemaTool] | None = None
    tool_choice: Literal["auto", "required", "none"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning: ChatReasoning | None = None
    reasoning_effort: Effort | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None

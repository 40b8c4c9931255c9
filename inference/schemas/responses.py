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


class CustomToolCallItem(StrictBody):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    id: str | None = None
    namespace: str | None = None
    caller: Caller | None = None
    async_: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("async", "async_"),
        serialization_alias="async",
    )


class CustomToolCallOutputItem(StrictBody):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[OutputPart]
    id: str | None = None
    caller: Caller | None = None


# --- the hosted web search's call, as an answer carries it (sent back by Codex) --------------


class SearchSource(StrictBody):
    type: Literal["url"]
    url: str


class ActionSearch(StrictBody):
    type: Literal["search"]
    query: str | None = None
    queries: list[str] | None = None
    sources: list[SearchSource] | None = None


class ActionOpenPage(StrictBody):
    type: Literal["open_page"]
    url: str | None = None


class ActionFind(StrictBody):
    type: Literal["find_in_page"]
    url: str
    pattern: str


class WebSearchCallItem(StrictBody):
    type: Literal["web_search_call"]
    id: str
    status: Literal["in_progress", "searching", "completed", "failed", "incomplete"]
    action: Annotated[ActionSearch | ActionOpenPage | ActionFind, Field(discriminator="type")]


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
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[WebSearchCallItem, Tag("web_search_call")]
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


class FormatText(StrictBody):
    type: Literal["text"]


ToolName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
Callers = list[Literal["direct", "programmatic"]]


class ResponseFunctionTool(StrictBody):
    type: Literal["function"]
    name: ToolName
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None
    allowed_callers: Callers | None = None
    defer_loading: bool | None = None
    output_schema: JSONObject | None = None
    async_: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("async", "async_"),
        serialization_alias="async",
    )


class ResponseInputSchemaTool(StrictBody):
    name: ToolName
    description: str | None = None
    input_schema: JSONObject


class GrammarFormat(StrictBody):
    type: Literal["grammar"]
    definition: str
    syntax: Literal["lark", "regex"]


class CustomTool(StrictBody):
    """A tool whose input is free text (Codex's `apply_patch`), optionally under a grammar."""

    type: Literal["custom"]
    name: ToolName
    description: str | None = None
    format: Annotated[FormatText | GrammarFormat, Field(discriminator="type")] | None = None
    allowed_callers: Callers | None = None
    defer_loading: bool | None = None
    async_: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("async", "async_"),
        serialization_alias="async",
    )


class NamespaceTool(StrictBody):
    """A named group of function and custom tools (Codex's `multi_agent_v1`); the model calls
    them by name with the namespace on the call item."""

    type: Literal["namespace"]
    name: ToolName
    description: str
    tools: Annotated[
        list[Annotated[ResponseFunctionTool | CustomTool, Field(discriminator="type")]],
        Field(min_length=1),
    ]


class SearchFilters(StrictBody):
    allowed_domains: list[str] | None = None


class UserLocation(StrictBody):
    type: Literal["approximate"] | None = None
    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None


class WebSearchTool(StrictBody):
    """The hosted web search (docs/decisions/README.md, "The hosted `web_search` tool").
    `search_content_types` is not in the public reference: Codex sends it and OpenAI takes it."""

    type: Literal["web_search", "web_search_2025_08_26"]
    external_web_access: bool | None = None
    filters: SearchFilters | None = None
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: UserLocation | None = None
    search_content_types: list[str] | None = None


class ToolSearchTool(StrictBody):
    type: Literal["tool_search"]
    description: str | None = None
    execution: Literal["server", "client"] | None = None
    parameters: JSONObject | None = None


# Built-in tools the gateway serves (every other one is 422: none is billed by the catalog).
HOSTED_TOOLS = ("web_search", "web_search_2025_08_26", "tool_search")
TOOL_TYPES = ("function", "custom", "namespace", *HOSTED_TOOLS)


def _tool_kind(value: Any) -> str | None:
    """A tool's tag: its `type`; without one the `{name, description, input_schema}` format."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "input_schema" if kind is None else kind


Tool = Annotated[
    Annotated[ResponseFunctionTool, Tag("function")]
    | Annotated[ResponseInputSchemaTool, Tag("input_schema")]
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[WebSearchTool, Tag("web_search")]
    | Annotated[WebSearchTool, Tag("web_search_2025_08_26")]
    | Annotated[ToolSearchTool, Tag("tool_search")],
    Discriminator(
        _tool_kind,
        custom_error_type="tool_type",
        custom_error_message="Input should be a tool of type "
        + ", ".join(f"'{kind}'" for kind in TOOL_TYPES)
        + " (or a {name, description, input_schema} object); other built-in tools are not served",
    ),
]


class ResponseToolChoiceFunction(StrictBody):
    type: Literal["function"]
    name: str


class ToolChoiceCustom(StrictBody):
    type: Literal["custom"]
    name: str


class ToolChoiceHosted(StrictBody):
    type: Literal["web_search", "web_search_2025_08_26"]


class ToolChoiceAllowed(StrictBody):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[JSONObject]


ToolChoice = (
    Literal["auto", "required", "none"]
    | Annotated[
        ResponseToolChoiceFunction | ToolChoiceCustom | ToolChoiceHosted | ToolChoiceAllowed,
        Field(discriminator="type"),
    ]
)


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
    """Every key optional: Codex sends `{"summary": "auto"}`, or `{}`, without an effort."""

    effort: Effort | None = None
    exclude: bool | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # summary's old name
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: Literal["standard", "pro"] | None = None


class ConversationRef(StrictBody):
    id: str


class PromptRef(StrictBody):
    """A prompt template stored at the provider."""

    id: str
    variables: dict[str, str | InputText | InputImage | InputFile] | None = None
    version: str | None = None


class ResponseStreamOptions(StrictBody):
    include_obfuscation: bool | None = None


class ContextManagement(StrictBody):
    type: str
    compact_threshold: Int64 | None = None


class ModerationMode(StrictBody):
    mode: Literal["score", "block"]


class ModerationPolicy(StrictBody):
    input: ModerationMode | None = None
    output: ModerationMode | None = None


class ResponseModeration(StrictBody):
    model: str
    policy: ModerationPolicy | None = None


class ImageOptions(StrictBody):
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class PromptCacheOptions(StrictBody):
    comparison_response_id: str | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: bool | None = None
    ttl: Literal["30m", "12h"] | None = None


class BackgroundOptions(StrictBody):
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


class AccessPrograms(StrictBody):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ResponseRequest(ReasoningChoice, StrictBody):
    """Every field of the public Responses API reference (the openai SDK's
    `ResponseCreateParams`) plus `client_metadata` (Codex); what each provider kind does with
    each is the table in docs/decisions/README.md, "Responses fields by provider kind"."""

    model: ModelId
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: str | ConversationRef | None = None
    prompt: PromptRef | None = None
    include: list[Includable] | None = None
    max_output_tokens: PositiveInt64 | None = None
    max_tool_calls: PositiveInt64 | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stream: bool | None = None
    stream_options: ResponseStreamOptions | None = None
    background: bool | None = None
    background_options: BackgroundOptions | None = None
    store: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ResponseReasoning | None = None
    reasoning_effort: Effort | None = None
    truncation: Literal["auto", "disabled"] | None = None
    context_management: list[ContextManagement] | None = None
    metadata: dict[str, str] | None = None
    client_metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    moderation: ResponseModeration | None = None
    image: ImageOptions | None = None
    access_programs: AccessPrograms | None = None

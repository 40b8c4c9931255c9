"""What the simulated model does with tools and response formats, for Chat Completions and the
Responses API alike (the OpenAI and OpenRouter fakes share it).

Deterministic, so a test or a newcomer's first agent sees the same turn every time:

* tools offered, ``tool_choice`` not ``none``, and the conversation not ending in tool
  results: a call of one tool, with arguments valid against its ``parameters`` schema. The
  tool is the forced one, else the one whose name and description share most words with the
  last user text, else the first.
* the conversation ends in tool results: text that reports them
  (``The <tool> tool returned: <output>``), unless ``tool_choice`` demands a call
  (``required``, a forced function), where the call is made again, preferring a tool not yet
  called.
* a JSON response format: a JSON document valid against the schema (``json_object``:
  ``{"answer": ...}``) whose first free-form string is the text the model would have said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .jsonschema_instance import instance

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_ENTITY = re.compile(r"[^\W_][\w'-]*", re.UNICODE)


class UnknownTool(ValueError):
    """``tool_choice`` forces a function that ``tools`` does not define (the API's 400)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str


@dataclass(frozen=True)
class Dialogue:
    """What the decisions read of a conversation."""

    last_user: str
    results: tuple[tuple[str, str], ...] = ()  # (tool name, output) ending the conversation
    called: frozenset[str] = frozenset()  # tools called earlier on


@dataclass(frozen=True)
class Action:
    """The model's turn: text, or a call of a tool."""

    text: str
    call: ToolCall | None = None
    structured: bool = False  # ``text`` is a JSON document


def decide(
    tools: list[Tool],
    tool_choice: str,
    response_format: Any,
    dialogue: Dialogue,
    reply_text: str | None,
) -> Action:
    """The turn for a request: ``tool_choice`` is ``auto``, ``required``, ``none`` or the forced
    function's name; ``response_format`` is a schema dict, ``"json_object"`` or None (text)."""
    if reply_text is not None:
        said = reply_text
    elif dialogue.results:
        said = tool_result_text(dialogue.results)
    else:
        said = f"Echo: {dialogue.last_user}"
    tool = choose_tool(tools, tool_choice, dialogue)
    if tool is not None:
        return Action("", ToolCall(tool.name, call_arguments(tool, dialogue.last_user)))
    if response_format is not None:
        return Action(document(response_format, said), structured=True)
    return Action(said)


def choose_tool(tools: list[Tool], tool_choice: str, dialogue: Dialogue) -> Tool | None:
    if tool_choice not in ("auto", "required", "none"):
        forced = next((t for t in tools if t.name == tool_choice), None)
        if forced is None:
            raise UnknownTool(tool_choice)
        return forced
    if not tools or tool_choice == "none":
        return None
    if dialogue.results:
        if tool_choice != "required":
            return None
        fresh = [t for t in tools if t.name not in dialogue.called]
        return _best(fresh or tools, dialogue.last_user)
    return _best(tools, dialogue.last_user)


def _best(tools: list[Tool], text: str) -> Tool:
    wanted = _words(text)
    scores = [len(wanted & (_words(t.name) | _words(t.description))) for t in tools]
    return tools[scores.index(max(scores))]  # ties: the first


def _words(text: str) -> set[str]:
    # Names are split too: get_weather, getWeather -> get, weather.
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text or "")
    return {w.lower() for w in _WORD.findall(spaced) if len(w) > 2}


def call_arguments(tool: Tool, last_user: str) -> str:
    """The call's arguments: compact JSON (as the API writes them), valid against the tool's
    schema, its first free-form string the last user text's most name-like word."""
    schema = tool.parameters if isinstance(tool.parameters, dict) else {"type": "object"}
    if not schema:
        schema = {"type": "object"}
    return _dumps(instance(schema, hint=entity(last_user)))


def entity(text: str) -> str | None:
    """The text's last capitalised word after its first (a name, a place), else its last word:
    what a one-string argument most likely wants ("weather in Paris?" -> "Paris")."""
    words = _ENTITY.findall(text or "")
    names = [w for w in words[1:] if w[0].isupper()]
    if names:
        return names[-1]
    return words[-1] if words else None


def tool_result_text(results: tuple[tuple[str, str], ...]) -> str:
    return " ".join(
        f"The {name} tool returned: {output}" if name else f"The tool returned: {output}"
        for name, output in results
    )


def document(response_format: Any, said: str) -> str:
    """A JSON document for ``response_format``: valid against the schema (best effort for
    exotic schemas), ``{"answer": said}`` for ``json_object`` or a schema that says nothing."""
    schema = response_format if isinstance(response_format, dict) else None
    if not schema or not any(
        k in schema
        for k in ("type", "properties", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "items")
    ):
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    return _dumps(instance(schema, hint=said))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- request shapes


def chat_tools(body: dict) -> list[Tool]:
    """The function tools of a Chat Completions request."""
    tools = []
    for entry in _list(body.get("tools")):
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools.append(_tool(function))
    return tools


def responses_tools(body: dict) -> list[Tool]:
    """The function tools of a Responses request."""
    return [
        _tool(entry)
        for entry in _list(body.get("tools"))
        if isinstance(entry, dict)
        and entry.get("type") == "function"
        and isinstance(entry.get("name"), str)
    ]


def _tool(spec: dict) -> Tool:
    description = spec.get("description")
    return Tool(
        spec["name"],
        description if isinstance(description, str) else "",
        spec.get("parameters"),
    )


def tool_choice(body: dict) -> str:
    """``auto``, ``required``, ``none`` or the forced function's name, from either API's shape
    (chat: ``{"type": "function", "function": {"name"}}``, responses: ``{"type", "name"}``)."""
    choice = body.get("tool_choice")
    if choice in ("auto", "required", "none"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else choice.get("name")
        if isinstance(name, str):
            return name
    return "auto"


def chat_format(body: dict) -> Any:
    response_format = body.get("response_format")
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return "json_object"
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else "json_object"
    return None


def responses_format(body: dict) -> Any:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return "json_object"
    if fmt.get("type") == "json_schema":
        return fmt["schema"] if isinstance(fmt.get("schema"), dict) else "json_object"
    return None


def chat_dialogue(messages: list[dict], content_text) -> Dialogue:
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "assistant":
            for call in _list(message.get("tool_calls")):
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("name"), str):
                    names[str(call.get("id"))] = function["name"]
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = names.get(str(message.get("tool_call_id")), "")
        results.append((name, content_text(message.get("content"))))
    users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    return Dialogue(users[-1] if users else "", tuple(reversed(results)), frozenset(names.values()))


def responses_dialogue(items: list[dict], last_user: str, content_text, earlier=()) -> Dialogue:
    """``earlier``: output items of the previous response (``previous_response_id``)."""
    names: dict[str, str] = {}
    for item in [*earlier, *items]:
        if item.get("type") == "function_call" and isinstance(item.get("name"), str):
            names[str(item.get("call_id"))] = item["name"]
    results = []
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            break
        output = item.get("output")
        text = output if isinstance(output, str) else content_text(output)
        results.append((names.get(str(item.get("call_id")), ""), text))
    return Dialogue(last_user, tuple(reversed(results)), frozenset(names.values()))


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []

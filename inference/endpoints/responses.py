"""POST /v1/responses, streamed or not."""

from __future__ import annotations

from ninja import Router

from catalog.models import HOSTED_SEARCH
from catalog.routing import Route
from core.errors import BadRequest
from licensing.courses import instructions as course_instructions
from licensing.rules.policy import Policy

from .. import pipeline, tokens
from ..billing import Usage
from ..providers import adapter_for
from ..providers import usage as usage_formats
from ..providers.base import ResponsesProvider, malformed
from ..schemas.common import SSE_RESPONSE, error_responses
from ..schemas.responses import (
    PART_MODALITY,
    FunctionCallOutputItem,
    ItemReference,
    ReasoningItem,
    ResponseInputSchemaTool,
    ResponseMessage,
    ResponseRequest,
    WebSearchTool,
)
from ..streaming import ProviderStream, ResponsesSSE
from .chat import TextGeneration, check_model_support

router = Router(tags=["responses"])

STATELESS_MESSAGE = (
    "previous_response_id is not supported by this provider; send the full conversation in `input`."
)
ITEM_REFERENCE_MESSAGE = (
    "item_reference is not supported by this provider; send the referenced items in `input`."
)
INCLUDE_MESSAGE = "include value '{value}' is not supported by this provider"
CONVERSATION_MESSAGE = (
    "conversation is not supported by this provider; send the full conversation in `input`."
)
WEB_SEARCH_SERVICE = "web_search"
WEB_SEARCH_DENIED = (
    "tools[{index}]: the hosted '{kind}' tool needs the web_search service, which this license "
    'does not enable; leave it out of `tools` (Codex CLI: web_search = "disabled" in '
    "config.toml)"
)
WEB_SEARCH_UNPRICED = (
    "tools[{index}]: the hosted '{kind}' tool is not priced for model '{model}' on this "
    'gateway; leave it out of `tools` (Codex CLI: web_search = "disabled" in config.toml)'
)


def _content(item):
    """A message's content or a function's output: a string or a list of parts (None: neither)."""
    if isinstance(item, ResponseMessage):
        return item.content
    if isinstance(item, FunctionCallOutputItem):
        return item.output
    return None


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content or ():
        if part.type in ("input_text", "output_text"):
            texts.append(part.text)
        elif part.type == "refusal":
            texts.append(part.refusal)
    return texts


class Responses(TextGeneration, endpoint="responses"):
    body = ResponseRequest

    def reserve_usage(self, body: ResponseRequest, fields: dict) -> Usage:
        """The prompt, the floor of what the answer costs (the output comes on top)."""
        return Usage(prompt_tokens=tokens.responses_prompt_tokens(fields, tokens.ROUGH))

    def input_texts(self, body: ResponseRequest):
        if body.instructions:
            yield body.instructions
        if isinstance(body.input, str):
            yield body.input
            return
        for item in body.input:
            yield from _texts(_content(item))
            if isinstance(item, ReasoningItem):
                yield from (part.text for part in item.summary)
                yield from (part.text for part in item.content or ())

    def with_instructions(self, body: ResponseRequest, text: str) -> ResponseRequest:
        joined = course_instructions.joined(text, body.instructions)
        return body.model_copy(update={"instructions": joined})

    def check_policy(self, policy: Policy, body: ResponseRequest) -> None:
        """The hosted web search is the gateway's `web_search` service asked through a tool:
        refused where the license does not enable that service (docs/decisions/README.md, "The
        hosted `web_search` tool")."""
        if WEB_SEARCH_SERVICE in policy.services:
            return
        for index, tool in enumerate(body.tools or ()):
            if isinstance(tool, WebSearchTool):
                raise BadRequest(WEB_SEARCH_DENIED.format(index=index, kind=tool.type))

    def prepare(self, route: Route, body: ResponseRequest) -> None:
        adapter = adapter_for(route.provider.kind, ResponsesProvider)
        _check_state(adapter, body)
        if body.include and adapter.responses_include is not None:
            for value in body.include:
                if value not in adapter.responses_include:
                    raise BadRequest(INCLUDE_MESSAGE.format(value=value))
        modalities = _input_modalities(adapter, body)
        check_model_support(route, modalities=modalities, effort=body.effort)
        if adapter.checks_requests:
            adapter.check_responses(route, self.payload(route, body))
        _check_search_priced(route, body)

    def payload(self, route: Route, body: ResponseRequest) -> dict:
        payload = body.model_dump(exclude_unset=True, by_alias=True)
        payload["model"] = route.upstream_model
        if body.tools is not None:
            payload["tools"] = []
            for tool in body.tools:
                dumped = tool.model_dump(exclude_unset=True, by_alias=True)
                if isinstance(tool, ResponseInputSchemaTool):
                    dumped = {
                        "type": "function",
                        "name": dumped["name"],
                        "parameters": dumped["input_schema"],
                        **({"description": tool.description} if tool.description else {}),
                    }
                payload["tools"].append(dumped)
        return payload

    async def call(self, route: Route, body: ResponseRequest, call):
        adapter = adapter_for(route.provider.kind, ResponsesProvider)
        payload = self.payload(route, body)
        if body.stream:
            opened = await adapter.responses_stream(route, payload)
            protocol = ResponsesSSE(payload, model=route.upstream_model)
            return ProviderStream(opened.response, protocol, opened.decoder)
        answer = await adapter.responses(route, payload)
        if not isinstance(answer, dict):
            raise malformed("responses answer is not an object")
        usage = usage_formats.openai_responses(answer.get("usage"), answer.get("output"))
        try:
            texts = [
                part.get("text") or ""
                for item in answer.get("output") or []
                if item.get("type") == "message"
                for part in item.get("content") or []
                if part.get("type") == "output_text"
            ]
        except (AttributeError, TypeError) as exc:
            raise malformed("responses output") from exc
        return self.answer_result(route, body, answer, usage, texts)


def _check_state(adapter: ResponsesProvider, body: ResponseRequest) -> None:
    """A provider without stored responses (the Responses API over chat, stateless) cannot
    continue a response or a conversation: a 400 before any call."""
    if body.previous_response_id and not adapter.stateful_responses:
        raise BadRequest(STATELESS_MESSAGE)
    if body.conversation is not None and not adapter.stateful_responses:
        raise BadRequest(CONVERSATION_MESSAGE)


def _input_modalities(adapter: ResponsesProvider, body: ResponseRequest) -> set[str]:
    """The modalities of the input's parts (images, files, audio) the model must take; an item
    reference needs stored responses (400 on a stateless provider)."""
    modalities: set[str] = set()
    if isinstance(body.input, str):
        return modalities
    for item in body.input:
        if isinstance(item, ItemReference) and not adapter.stateful_responses:
            raise BadRequest(ITEM_REFERENCE_MESSAGE)
        parts = _content(item)
        if isinstance(parts, list):
            modalities |= {PART_MODALITY[p.type] for p in parts if p.type in PART_MODALITY}
    return modalities


def _check_search_priced(route: Route, body: ResponseRequest) -> None:
    """The provider bills each hosted web search: the tool goes only to a model whose catalog
    cost prices it (inference.billing, HOSTED_SEARCH), never to be run for free. A failover
    route refused here is skipped."""
    cost = route.model.cost if route.model is not None else {}
    if HOSTED_SEARCH in cost:
        return
    for index, tool in enumerate(body.tools or ()):
        if isinstance(tool, WebSearchTool):
            raise BadRequest(
                WEB_SEARCH_UNPRICED.format(index=index, kind=tool.type, model=route.requested_model)
            )


_operation = Responses()


@router.post(
    "/responses",
    response={200: dict, **error_responses(400, 401, 403, 404, 422, 429, 500, 503)},
    openapi_extra=SSE_RESPONSE,
    summary="Create a model response (stream: true answers with server-sent events)",
)
async def create_response(request, body: ResponseRequest):
    return await pipeline.run(request, _operation, body)

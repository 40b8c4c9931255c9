"""POST /v1/chat/completions, streamed or not."""

from __future__ import annotations

from ninja import Router

from catalog.routing import Route
from core.errors import BadRequest
from core.jsonio import json_response
from licensing.courses import instructions as course_instructions

from .. import pipeline, tokens
from ..billing import Usage, credits_for
from ..providers import adapter_for
from ..providers import usage as usage_formats
from ..providers.base import ChatProvider, malformed
from ..schemas.chat import PART_MODALITY, ChatCompletionRequest, InputSchemaTool, SystemMessage
from ..schemas.common import SSE_RESPONSE, error_responses
from ..streaming import ChatSSE, ProviderStream, answer_id

router = Router(tags=["chat"])


def check_model_support(route: Route, *, modalities: set[str], effort: str | None) -> None:
    """Step 7 for text generation: the model's input modalities and reasoning efforts."""
    if route.model is None:
        return  # unknown to the catalog: the provider decides
    for modality in sorted(modalities):
        if not route.model.input_modality.get(modality):
            raise BadRequest(
                f"No available provider for model '{route.requested_model}' supports "
                f"{modality} input"
            )
    if effort is not None and effort not in route.model.options.get("reasoning_efforts", []):
        raise BadRequest(f"Model does not support reasoning effort '{effort}'")


class TextGeneration(pipeline.Operation):
    """What chat completions and responses share: billing from per-token usage."""

    def billed(self, route: Route, body, usage: Usage) -> tuple[str, int]:
        if route.model is None:
            return body.model, 0
        return route.model.model_id, credits_for(route.model.cost, usage)

    def stream_result(self, route: Route, body, usage: Usage) -> pipeline.ProviderResult:
        return self.answer_result(route, body, {}, usage, texts=())

    def answer_result(self, route: Route, body, answer: dict, usage: Usage, texts):
        billed_model, credits = self.billed(route, body, usage)
        return pipeline.ProviderResult(
            body=answer,
            billed_model=billed_model,
            usage=usage,
            credits=credits,
            output_texts=texts,
            upstream_id=answer_id(answer.get("id")),
        )

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        usage = body.get("usage")
        if not isinstance(usage, dict):
            usage = body["usage"] = {}
        usage["credits_used"] = result.credits
        usage["credits_remaining"] = remaining
        return json_response(body)


def _function_tool(tool: dict) -> dict:
    if "input_schema" in tool:
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        return {"type": "function", "function": function}
    return tool


class ChatCompletions(TextGeneration, endpoint="chat_completions"):
    body = ChatCompletionRequest

    def reserve_usage(self, body: ChatCompletionRequest, fields: dict) -> Usage:
        """The prompt, the floor of what the answer costs (the completion comes on top)."""
        return Usage(prompt_tokens=tokens.chat_prompt_tokens(fields, tokens.ROUGH))

    def input_texts(self, body: ChatCompletionRequest):
        for message in body.messages:
            content = message.content
            if isinstance(content, str):
                yield content
            elif content:
                for part in content:
                    if part.type == "text":
                        yield part.text

    def with_instructions(self, body: ChatCompletionRequest, text: str) -> ChatCompletionRequest:
        first = SystemMessage.model_validate(course_instructions.system_message(text))
        return body.model_copy(update={"messages": [first, *body.messages]})

    def prepare(self, route: Route, body: ChatCompletionRequest) -> None:
        modalities = {
            PART_MODALITY[part.type]
            for message in body.messages
            if message.role == "user" and not isinstance(message.content, str)
            for part in message.content
            if part.type in PART_MODALITY
        }
        check_model_support(route, modalities=modalities, effort=body.effort)
        adapter = adapter_for(route.provider.kind, ChatProvider)
        if adapter.checks_requests:
            adapter.check_chat(route, self.payload(route, body))

    def payload(self, route: Route, body: ChatCompletionRequest) -> dict:
        payload = body.model_dump(exclude_unset=True, by_alias=True)
        payload["model"] = route.upstream_model
        if body.tools is not None:
            payload["tools"] = [
                _function_tool(t.model_dump(exclude_unset=True, by_alias=True))
                if isinstance(t, InputSchemaTool)
                else t.model_dump(exclude_unset=True, by_alias=True)
                for t in body.tools
            ]
        if body.stream:
            # Usage comes in the last chunk only when asked for: a stream is billed like the
            # same request unstreamed.
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }
        return payload

    async def call(self, route: Route, body: ChatCompletionRequest, call):
        adapter = adapter_for(route.provider.kind, ChatProvider)
        payload = self.payload(route, body)
        if body.stream:
            opened = await adapter.chat_stream(route, payload)
            protocol = ChatSSE(payload, model=route.upstream_model)
            return ProviderStream(opened.response, protocol, opened.decoder)
        answer = await adapter.chat(route, payload)
        if not isinstance(answer, dict):
            raise malformed("chat answer is not an object")
        usage = usage_formats.openai_chat(answer.get("usage"))
        try:
            texts = [
                choice["message"].get("content") or ""
                for choice in answer.get("choices") or []
                if isinstance(choice.get("message"), dict)
            ]
        except (AttributeError, TypeError, KeyError) as exc:
            raise malformed("chat choices") from exc
        return self.answer_result(route, body, answer, usage, texts)


_operation = ChatCompletions()


@router.post(
    "/chat/completions",
    response={200: dict, **error_responses(400, 401, 403, 404, 422, 429, 500, 503)},
    openapi_extra=SSE_RESPONSE,
    summary="Create a chat completion (stream: true answers with server-sent events)",
)
async def create_chat_completion(request, body: ChatCompletionRequest):
    return await pipeline.run(request, _operation, body)

"""A fake of Azure OpenAI: chat completions, responses and embeddings on both URL styles.

Served at the resource endpoint (``<origin>``, as ``https://RESOURCE.openai.azure.com``) with
the ``api-key`` header (on the v1 path, ``Authorization: Bearer <key>`` too, as the plain
``openai`` client sends it):

- the v1 API path: ``/openai/v1/chat/completions``, ``/openai/v1/responses``,
  ``/openai/v1/embeddings``, the deployment named by the body's ``model`` (``api-version``
  optional there: ``preview`` or ``latest``);
- the classic paths: ``/openai/deployments/{deployment}/chat/completions`` and ``/embeddings``,
  ``/openai/responses`` (the deployment as ``model``), each with a required ``api-version``
  (missing: Azure's 404 "Resource not found"; unknown: its 400 "API version not supported";
  on ``/openai/responses``, one from 2025-03-01-preview on).

A deployment the resource lacks is Azure's 404 ``DeploymentNotFound``. Answers are the OpenAI
fake's (:class:`OpenAIFake`, the deployment's model behind it) with Azure's content-filter
annotations: ``prompt_filter_results`` and each choice's ``content_filter_results``, and on a
stream an opening chunk without choices that carries the prompt's. A prompt holding one of
``filter_terms`` is Azure's content-filter 400; ``filter_completion`` cuts answers short with
``finish_reason: "content_filter"``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .openai import OpenAIFake, bearer_token
from .server import ApiError, RecordedRequest, Response, json_response, sse_data

API_VERSIONS = frozenset(
    {
        "2024-02-01",
        "2024-06-01",
        "2024-10-21",
        "2024-12-01-preview",
        "2025-03-01-preview",
        "2025-04-01-preview",
    }
)
V1_VERSIONS = frozenset({"preview", "latest"})
# The classic Responses path came with these (an older version is Azure's 400 there).
RESPONSES_VERSIONS = frozenset({"2025-03-01-preview", "2025-04-01-preview"})
# deployment name -> the model behind it (the names an operator chose when deploying).
DEFAULT_DEPLOYMENTS = {
    "gpt-4o-mini": "gpt-4o-mini",
    "gpt-4.1": "gpt-4.1",
    "o4-mini": "o4-mini",
    "text-embedding-3-small": "text-embedding-3-small",
    "text-embedding-3-large": "text-embedding-3-large",
    "text-embedding-ada-002": "text-embedding-ada-002",
}
CATEGORIES = ("hate", "self_harm", "sexual", "violence")
ACCESS_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
    "a valid key for an active subscription and use a correct regional API endpoint for your "
    "resource."
)
DEPLOYMENT_NOT_FOUND = (
    "The API deployment for this resource does not exist. If you created the deployment within "
    "the last 5 minutes, please wait a moment and try again."
)
FILTERED_PROMPT = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content management "
    "policy. Please modify your prompt and retry. To learn more about our content filtering "
    "policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766"
)
DEFAULT_MESSAGES = {
    401: ACCESS_DENIED,
    404: "Resource not found",
    429: "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
    "2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. "
    "Please retry after 6 seconds.",
    500: "The server had an error while processing your request. Sorry about that!",
}


def filter_results(violence: str = "safe") -> dict:
    """Azure's per-category verdict (every category safe unless `violence` says otherwise)."""
    results: dict[str, Any] = {c: {"filtered": False, "severity": "safe"} for c in CATEGORIES}
    if violence != "safe":
        results["violence"] = {"filtered": True, "severity": violence}
    return results


def prompt_filter_results() -> list[dict]:
    return [{"prompt_index": 0, "content_filter_results": filter_results()}]


class AzureOpenAIFake(OpenAIFake):
    """Azure OpenAI simulator.

    Args:
        api_key: the only accepted ``api-key``; None accepts any (but one is required).
        deployments: deployment name -> model (default: one per catalog model, same name).

    Knobs: ``filter_terms`` (words that make the prompt filter refuse a request),
    ``filter_completion`` (answers cut by the completion filter), and the OpenAI fake's.
    """

    name = "azure"
    base_path = ""
    ROUTES = [
        ("POST", r"/openai/v1/chat/completions", "v1_chat"),
        ("POST", r"/openai/v1/responses", "v1_responses"),
        ("POST", r"/openai/v1/embeddings", "v1_embeddings"),
        ("POST", r"/openai/deployments/(?P<deployment>[^/]+)/chat/completions", "classic_chat"),
        ("POST", r"/openai/deployments/(?P<deployment>[^/]+)/embeddings", "classic_embeddings"),
        ("POST", r"/openai/responses", "classic_responses"),
    ]
    PUBLIC = frozenset()
    KNOBS = {"filter_terms": ("forbidden-topic",), "filter_completion": False}

    def __init__(self, api_key: str | None = None, deployments: dict[str, str] | None = None):
        super().__init__(api_key=api_key)
        self._initial_deployments = dict(
            DEFAULT_DEPLOYMENTS if deployments is None else deployments
        )
        self.deployments = dict(self._initial_deployments)

    def _reset_state(self) -> None:
        super()._reset_state()
        self.deployments = dict(self._initial_deployments)

    # -- protocol hooks ----------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        if message is None or set(extra) <= {"code"}:  # Azure's own errors: {"code", "message"}
            code = extra.get("code") or str(status)
            error = {"code": code, "message": message or DEFAULT_MESSAGES.get(status, "Error")}
            return json_response({"error": error}, status)
        return super().error(status, message, **extra)  # the model's (OpenAI's) errors

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, "Resource not found")

    def check_auth(self, request: RecordedRequest) -> Response | None:
        key = request.headers.get("api-key")
        if key is None and request.path.startswith("/openai/v1/"):
            key = bearer_token(request)  # the v1 API takes the key as a bearer token too
        if not key or (self.api_key is not None and key != self.api_key):
            return self.error(401, ACCESS_DENIED)
        return None

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return [("apim-request-id", "00000000-0000-0000-0000-000000000000")]

    # -- helpers -----------------------------------------------------------------------

    def _check_version(self, request: RecordedRequest, *, classic: bool) -> None:
        version = request.query.get("api-version")
        if version is None:
            if classic:
                raise self.fail(404, "Resource not found")
            return
        if version not in (API_VERSIONS if classic else V1_VERSIONS | API_VERSIONS):
            raise self.fail(400, "API version not supported", code="BadRequest")

    def _model_of(self, deployment: Any) -> str:
        if not isinstance(deployment, str) or deployment not in self.deployments:
            raise self.fail(404, DEPLOYMENT_NOT_FOUND, code="DeploymentNotFound")
        return self.deployments[deployment]

    def _as_openai(self, request: RecordedRequest, deployment: Any) -> RecordedRequest:
        """The request as the OpenAI fake takes it: the deployment's model in the body."""
        body = dict(self.body_json(request))
        body["model"] = self._model_of(deployment)
        self._prompt_filter(body)
        return dataclasses.replace(request, json=body)

    def _prompt_filter(self, body: dict) -> None:
        text = json.dumps(body.get("messages", body.get("input", "")), ensure_ascii=False)
        if not any(term in text.lower() for term in self.filter_terms):
            return
        error = {
            "message": FILTERED_PROMPT,
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": filter_results(violence="medium"),
            },
        }
        raise ApiError(json_response({"error": error}, 400))

    # -- chat completions --------------------------------------------------------------

    def v1_chat(self, request: RecordedRequest) -> Response:
        self._check_version(request, classic=False)
        body = self.body_json(request)
        return self._chat(self._as_openai(request, body.get("model")))

    def classic_chat(self, request: RecordedRequest, deployment: str) -> Response:
        self._check_version(request, classic=True)
        return self._chat(self._as_openai(request, deployment))

    def _chat(self, request: RecordedRequest) -> Response:
        response = self.chat_completions(request)
        if response.status != 200:
            return response
        if not response.is_stream:
            answer = json.loads(response.body)
            answer["prompt_filter_results"] = prompt_filter_results()
            for choice in answer["choices"]:
                choice["content_filter_results"] = filter_results()
                if self.filter_completion:
                    _cut(choice["message"])
                    choice["finish_reason"] = "content_filter"
            return json_response(answer)
        response.events = self._azure_events(response.events or [])
        return response

    def _azure_events(self, events: list[bytes]) -> list[bytes]:
        opening = {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": prompt_filter_results(),
        }
        pairs = [(event, _chunk(event)) for event in events]
        if self.filter_completion:  # the filter stops the answer before its last piece
            finish = next(i for i, (_, c) in enumerate(pairs) if c is not None and _finish(c))
            del pairs[finish - 1]
        out = [sse_data(opening)]
        for event, chunk in pairs:
            if chunk is None:
                out.append(event)
                continue
            for choice in chunk.get("choices") or []:
                choice["content_filter_results"] = {} if choice.get("delta") else filter_results()
                if choice.get("finish_reason") and self.filter_completion:
                    choice["finish_reason"] = "content_filter"
            out.append(sse_data(chunk))
        return out

    # -- responses and embeddings ------------------------------------------------------

    def v1_responses(self, request: RecordedRequest) -> Response:
        self._check_version(request, classic=False)
        body = self.body_json(request)
        return self.create_response(self._as_openai(request, body.get("model")))

    def classic_responses(self, request: RecordedRequest) -> Response:
        self._check_version(request, classic=True)
        if request.query["api-version"] not in RESPONSES_VERSIONS:
            raise self.fail(400, "API version not supported", code="BadRequest")
        body = self.body_json(request)
        return self.create_response(self._as_openai(request, body.get("model")))

    def v1_embeddings(self, request: RecordedRequest) -> Response:
        self._check_version(request, classic=False)
        body = self.body_json(request)
        return self.embeddings(self._as_openai(request, body.get("model")))

    def classic_embeddings(self, request: RecordedRequest, deployment: str) -> Response:
        self._check_version(request, classic=True)
        return self.embeddings(self._as_openai(request, deployment))


def _chunk(event: bytes) -> dict | None:
    text = event.decode("utf-8")
    if not text.startswith("data: ") or text.startswith("data: [DONE]"):
        return None
    return json.loads(text[len("data: ") :])


def _finish(chunk: dict) -> bool:
    return any(c.get("finish_reason") for c in chunk.get("choices") or [])


def _cut(message: dict) -> None:
    content = message.get("content")
    if isinstance(content, str):
        words = content.split(" ")
        message["content"] = " ".join(words[: max(1, len(words) // 2)])

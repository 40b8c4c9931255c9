"""`azure_openai`: Azure OpenAI. OpenAI's bodies and answers with Azure's URLs and auth:

- the `api-key` header (Entra ID tokens are not supported: docs/providers.md);
- two URL styles per connection (`Connection.options`, catalog/connection_options.py): without
  `api_version`, the v1 API path (`{endpoint}/openai/v1/chat/completions`, the deployment as
  `model`); with it, the classic deployment path
  (`{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`; Responses at
  `{endpoint}/openai/responses?api-version=...` with the deployment as `model`);
- the deployment: `options["deployments"][model id]`, else the catalog row's upstream id;
- Azure's prompt filter (a 400 with `error.code == "content_filter"`) is the clear 400
  `CONTENT_FILTERED`; an answer its filter cut ends with `finish_reason: "content_filter"` and
  is relayed as it is, with Azure's `prompt_filter_results` / `content_filter_results`
  (categories and severities, no provider name) and a stream's opening chunk without choices.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from catalog.routing import Route

from .openai import OpenAITransport, error_object

CONTENT_FILTERED = "The request was blocked by the provider's content filter"
# The error codes of Azure's content filtering (prompt filter, jailbreak shield, policy).
FILTER_CODES = frozenset({"content_filter", "ResponsibleAIPolicyViolation"})
# The paths whose body names the model (the deployment, on both URL styles).
_MODEL_PATHS = frozenset({"/chat/completions", "/responses", "/embeddings"})


def deployment_for(route: Route) -> str:
    """The deployment that serves the route: the connection's map, else the upstream id."""
    deployments = route.connection.options.get("deployments") or {}
    model_id = route.model.model_id if route.model is not None else route.requested_model
    upstream = route.upstream_model
    return deployments.get(model_id) or deployments.get(upstream) or upstream


def azure_path(route: Route, path: str) -> str:
    """The Azure path of an OpenAI path (`/chat/completions`, `/responses`, `/embeddings`)."""
    version = route.connection.options.get("api_version")
    if not version:
        return "/openai/v1" + path
    query = "?api-version=" + quote(version, safe="")
    if path == "/responses":
        return "/openai/responses" + query
    return f"/openai/deployments/{quote(deployment_for(route), safe='')}{path}{query}"


class AzureOpenAITransport(OpenAITransport):
    kind = "azure_openai"

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"api-key": route.connection.api_key}

    def _azure(self, route: Route, path: str, body: Any) -> str:
        if path in _MODEL_PATHS and isinstance(body, dict):
            body["model"] = deployment_for(route)
        return azure_path(route, path)

    async def request(
        self,
        route: Route,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        max_bytes: int | None = None,
    ) -> httpx.Response:
        path = self._azure(route, path, json)
        return await super().request(
            route, method, path, json=json, params=params, max_bytes=max_bytes
        )

    async def open_stream(self, route: Route, path: str, body: Any):
        return await super().open_stream(route, self._azure(route, path, body), body)

    # --- errors ----------------------------------------------------------------------------

    def content_blocked(self, response: httpx.Response) -> bool:
        error = error_object(response)
        inner = error.get("innererror")
        codes = {error.get("code"), inner.get("code") if isinstance(inner, dict) else None}
        return bool(codes & FILTER_CODES)

    def error_message(self, response: httpx.Response) -> str:
        if response.status_code in (400, 422) and self.content_blocked(response):
            return CONTENT_FILTERED
        return super().error_message(response)

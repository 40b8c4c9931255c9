"""POST /v1/bedrock/embeddings: the cloud provider's native embeddings bodies.

The body's shape follows the model prefix (`amazon.titan-` or `cohere.`); it is forwarded
without `model` to the model's `InvokeModel`, and the model's own answer comes back with a
`usage` object added. Billed per input token like /v1/embeddings.
"""

from __future__ import annotations

from ninja import Body, Router

from catalog.routing import Route

from .. import pipeline
from ..providers import adapter_for, refined_route
from ..providers.base import BedrockEmbedder
from ..schemas.bedrock import (
    BedrockEmbeddingsRequest,
    BedrockEmbeddingsResponse,
    TitanEmbeddingsRequest,
)
from ..schemas.common import SERVICE_HEADERS, error_responses
from .embeddings import EmbeddingOperation

router = Router(tags=["embeddings"])


class BedrockEmbeddings(EmbeddingOperation, endpoint="bedrock_embeddings"):
    body = BedrockEmbeddingsRequest

    def input_texts(self, body):
        return [body.inputText] if isinstance(body, TitanEmbeddingsRequest) else list(body.texts)

    def prepare(self, route: Route, body) -> None:
        refined_route(route)

    async def call(self, route: Route, body, call) -> pipeline.ProviderResult:
        call.route = route = refined_route(route)
        adapter = adapter_for(route.provider.kind, BedrockEmbedder)
        # An explicit null means "the provider's default", which the provider spells by omission.
        payload = body.model_dump(exclude_unset=True, exclude_none=True, exclude={"model"})
        answer, usage = await adapter.invoke_embeddings(route, payload)
        return self.result(route, body, answer, usage.prompt_tokens)


_operation = BedrockEmbeddings()


@router.post(
    "/bedrock/embeddings",
    response={
        200: BedrockEmbeddingsResponse,
        **error_responses(400, 401, 403, 404, 422, 429, 500, 503),
    },
    openapi_extra=SERVICE_HEADERS,
    summary="Create embeddings with the cloud provider's native bodies",
)
async def create_bedrock_embeddings(request, body: BedrockEmbeddingsRequest = Body(...)):
    return await pipeline.run(request, _operation, body)

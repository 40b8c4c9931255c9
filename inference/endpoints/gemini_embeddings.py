"""POST /v1/gemini/embeddings (policy service `gemini_embeddings`): the multimodal provider's
native embeddings, with its own fields (`task_type`, `output_dimensionality`, `title`).

A string goes to `:embedContent`, a list to `:batchEmbedContents`. The provider's embedding
answers carry no token counts, so the input is counted with `:countTokens` (in parallel with
the embedding call) and billed per token at the catalog price.
"""

from __future__ import annotations

from ninja import Router

from catalog.routing import Route

from .. import pipeline
from ..providers import adapter_for
from ..providers.base import GeminiEmbedder
from ..schemas.common import SERVICE_HEADERS, error_responses
from ..schemas.gemini import GeminiEmbeddingsRequest, GeminiEmbeddingsResponse
from .embeddings import EmbeddingOperation

router = Router(tags=["embeddings"])


class GeminiEmbeddings(EmbeddingOperation, endpoint="gemini_embeddings"):
    body = GeminiEmbeddingsRequest

    def input_texts(self, body: GeminiEmbeddingsRequest):
        return [*body.texts(), body.title or ""]

    async def call(
        self, route: Route, body: GeminiEmbeddingsRequest, call
    ) -> pipeline.ProviderResult:
        adapter = adapter_for(route.provider.kind, GeminiEmbedder)
        vectors, tokens = await adapter.embed(
            route, body.texts(), batch=not isinstance(body.input, str), options=body.options()
        )
        answer = {"model": body.model, "embeddings": [{"values": v} for v in vectors]}
        return self.result(route, body, answer, tokens)


_operation = GeminiEmbeddings()


@router.post(
    "/gemini/embeddings",
    response={
        200: GeminiEmbeddingsResponse,
        **error_responses(400, 401, 403, 404, 422, 429, 500, 503),
    },
    openapi_extra=SERVICE_HEADERS,
    summary="Create embeddings with the multimodal provider's native fields",
)
async def create_gemini_embeddings(request, body: GeminiEmbeddingsRequest):
    return await pipeline.run(request, _operation, body)

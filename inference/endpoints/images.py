"""POST /v1/images/generations (the only image endpoint; edits and variations do not exist)."""

from __future__ import annotations

from ninja import Router

from catalog.routing import Route

from .. import pipeline
from ..api import json_response
from ..errors import PROVIDER_ERROR
from ..providers import adapter_for
from ..providers.base import ProviderFailure
from ..schemas.common import error_responses
from ..schemas.images import ImageGenerationRequest, ImageGenerationResponse

router = Router(tags=["images"])


class ImageGeneration(pipeline.Operation):
    endpoint = "image_generation"
    service = "image_generation"
    output_modality = "image"

    def input_texts(self, body: ImageGenerationRequest):
        return [body.prompt, body.negative_prompt or ""]

    async def call(self, route: Route, body, call) -> pipeline.ProviderResult:
        adapter = adapter_for(route.provider.kind)
        generate = getattr(adapter, "generate_images", None)
        if generate is None:
            raise ProviderFailure(PROVIDER_ERROR, status=500, retryable=False)
        return await generate(route, body)

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        body["usage"]["credits_used"] = result.credits
        body["usage"]["credits_remaining"] = remaining
        return json_response(body)


_operation = ImageGeneration()


@router.post(
    "/images/generations",
    response={200: ImageGenerationResponse, **error_responses(400, 401, 403, 404, 422, 500, 503)},
    summary="Generate images",
)
async def create_images(request, body: ImageGenerationRequest):
    return await pipeline.run(request, _operation, body)

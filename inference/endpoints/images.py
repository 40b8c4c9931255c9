"""POST /v1/images/generations (the only image endpoint; edits and variations do not exist).

Each image adapter (`generate_images(route, body) -> GeneratedImages`) only speaks its wire
protocol; the response shape, watermark, flagged answers and billing are decided here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ninja import Router

from catalog.routing import Route
from core.jsonio import json_response

from .. import pipeline
from ..billing import Usage, credits_for
from ..imagesizes import megapixels
from ..providers import adapter_for, refined_route
from ..providers.base import GeneratedImages, ImageProvider
from ..schemas.common import SERVICE_HEADERS, error_responses
from ..schemas.images import ImageGenerationRequest, ImageGenerationResponse

router = Router(tags=["images"])

WATERMARK_BY_FAMILY = {
    "gpt-image": "c2pa",
    "titan": "provenance",
    "nova": "provenance",
    "imagen": "synthid",
    "flash-image": "synthid",
    "dall-e": "none",
    "stability": "none",
}


def watermark_for(route: Route) -> str:
    if route.model is None:
        return "none"
    options = route.model.options
    return options.get("watermark") or WATERMARK_BY_FAMILY.get(options.get("family") or "", "none")


class ImageGeneration(pipeline.Operation, endpoint="image_generation"):
    body = ImageGenerationRequest

    def input_texts(self, body: ImageGenerationRequest):
        return [body.prompt, body.negative_prompt or ""]

    def reserve_usage(self, body: ImageGenerationRequest, fields: dict) -> Usage:
        """`n` images at the size and quality asked for (a flagged answer releases them)."""
        return Usage(images=body.n, size=body.size, quality=body.quality)

    def prepare(self, route: Route, body) -> Route:
        # A provider-side constraint on the connection (a model served in one cloud region
        # only) is a step-7 400, before any call or ledger row; the ledger then names the
        # connection that really served the request.
        return refined_route(route)

    async def call(self, route: Route, body, call) -> pipeline.ProviderResult:
        adapter = adapter_for(route.provider.kind, ImageProvider)
        generated: GeneratedImages = await adapter.generate_images(route, body)
        return self.result(route, body, generated)

    def result(self, route: Route, body, generated: GeneratedImages) -> pipeline.ProviderResult:
        watermark = watermark_for(route)
        data: list[dict[str, Any]]
        mp: float | None = None
        if generated.flagged or not generated.images:
            # One flagged entry in place of the images; nothing made, nothing charged.
            data = [_entry("", None, None, watermark, flagged=True)]
            usage, credits = Usage(images=0), 0
        else:
            data = [
                _entry(image.b64_json, image.revised_prompt, image.seed, watermark, flagged=False)
                for image in generated.images
            ]
            usage, mp = _billed_usage(route, body, generated, len(data))
            cost = route.model.cost if route.model is not None else None
            credits = credits_for(cost, usage) if cost else 0
        return pipeline.ProviderResult(
            body={
                "created": generated.created or 0,
                "model": body.model,
                "data": data,
                "usage": {
                    "images": usage.images,
                    "input_tokens": usage.prompt_tokens,
                    "output_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                    "megapixels": mp,
                },
            },
            billed_model=route.model.model_id if route.model is not None else body.model,
            usage=usage,
            credits=credits,
        )

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        body["usage"]["credits_used"] = result.credits
        body["usage"]["credits_remaining"] = remaining
        return json_response(body)


def _entry(
    b64_json: str, revised_prompt: str | None, seed: int | None, watermark: str, *, flagged: bool
) -> dict[str, Any]:
    """One image of the answer's `data`."""
    return {
        "b64_json": b64_json,
        "revised_prompt": revised_prompt,
        "seed": seed,
        "watermark": watermark,
        "flagged": flagged,
    }


def _billed_usage(
    route: Route, body, generated: GeneratedImages, count: int
) -> tuple[Usage, float | None]:
    """What `count` images are billed on, and their megapixels as the answer shows them: the
    tokens when the model is priced per token and the provider counted them, else the
    megapixels (None with tokens)."""
    token_priced = route.model is not None and route.model.cost.get("type") == "per_token"
    has_tokens = token_priced and generated.output_tokens is not None
    mp = None if has_tokens else megapixels(generated.size or body.size, count)
    input_tokens = generated.input_tokens if has_tokens else None
    output_tokens = generated.output_tokens if has_tokens else None
    usage = Usage(
        prompt_tokens=input_tokens,
        completion_tokens=output_tokens,
        total_tokens=(input_tokens or 0) + (output_tokens or 0) if has_tokens else None,
        images=count,
        megapixels=Decimal(str(mp)) if mp is not None else None,
        size=generated.size or body.size,
        quality=generated.quality or body.quality,
    )
    return usage, mp


_operation = ImageGeneration()


@router.post(
    "/images/generations",
    response={
        200: ImageGenerationResponse,
        **error_responses(400, 401, 403, 404, 422, 429, 500, 503),
    },
    openapi_extra=SERVICE_HEADERS,
    summary="Generate images",
)
async def create_images(request, body: ImageGenerationRequest):
    return await pipeline.run(request, _operation, body)

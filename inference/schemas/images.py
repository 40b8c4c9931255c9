from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from .common import ModelId, StrictBody

# Pixels per edge; providers snap sizes to what they make, this only stops absurd ones.
MAX_IMAGE_EDGE = 100_000


def _bounded_size(value: str) -> str:
    if value != "auto":
        width, height = (int(edge) for edge in value.split("x"))
        if max(width, height) > MAX_IMAGE_EDGE:
            raise ValueError(f"width and height must be at most {MAX_IMAGE_EDGE}")
    return value


ImageSize = Annotated[
    str,
    Field(pattern=r"^(auto|[1-9][0-9]{0,5}x[1-9][0-9]{0,5})$"),
    AfterValidator(_bounded_size),
]


class ImageGenerationRequest(StrictBody):
    model: ModelId
    prompt: str = Field(min_length=1)
    n: int = Field(default=1, ge=1, le=10, description="Per-model maximums apply upstream")
    size: ImageSize = Field(
        default="1024x1024",
        description="`WxH` (positive integers, each at most 100000) or `auto`; normalized per "
        "provider to the nearest supported size or aspect ratio",
    )
    quality: Literal["standard", "hd", "low", "medium", "high", "auto"] | None = None
    style: Literal["vivid", "natural"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = None
    output_compression: int | None = Field(default=None, ge=0, le=100)
    moderation: Literal["auto", "low"] | None = None
    seed: int | None = Field(default=None, ge=0, le=4294967295)
    negative_prompt: str | None = None
    user: str | None = None


class ImageItem(BaseModel):
    b64_json: str
    revised_prompt: str | None
    seed: int | None
    watermark: Literal["c2pa", "provenance", "synthid", "none"]
    flagged: bool


class ImageUsage(BaseModel):
    images: int
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    megapixels: float | None
    credits_used: int
    credits_remaining: int | None


class ImageGenerationResponse(BaseModel):
    created: int
    model: str
    data: list[ImageItem]
    usage: ImageUsage

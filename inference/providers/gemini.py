"""`multimodal`: the Google Gemini API (Generative Language, base URL like
https://generativelanguage.googleapis.com/v1beta; key in `x-goog-api-key`).

Chat completions: `models/{model}:generateContent` and `:streamGenerateContent?alt=sse`, the
translation in `gemini_chat`; `/v1/responses` through the chat (providers.bridge).
Images: imagen-type models through `models/{model}:predict`, the flash-image model through
`models/{model}:generateContent`. Embeddings: `:embedContent` (one text),
`:batchEmbedContents` (a list) and `:countTokens` (their answers carry no token counts).
"""

from __future__ import annotations

import asyncio
import logging
import math
from urllib.parse import quote

import httpx
import orjson

from catalog.routing import Route
from inference.imagesizes import nearest_aspect_ratio, parse_size

from . import gemini_chat
from . import usage as usage_formats
from .base import (
    ContentBlocked,
    GeneratedImage,
    GeneratedImages,
    ProviderFailure,
    Transport,
    UpstreamStream,
    malformed,
    unavailable,
)
from .bridge import ResponsesOverChat
from .events import SSEFrames, TranslatingDecoder

logger = logging.getLogger("gateway")

IMAGEN_ASPECT_RATIOS = ("1:1", "3:4", "4:3", "9:16", "16:9")
FLASH_IMAGE_ASPECT_RATIOS = (
    "1:1",
    "2:3",
    "3:2",
    "3:4",
    "4:3",
    "4:5",
    "5:4",
    "9:16",
    "16:9",
    "21:9",
)
# The pixel sizes each model family delivers per aspect ratio (1K; 2K doubles both edges).
IMAGEN_PIXELS = {
    "1:1": (1024, 1024),
    "3:4": (896, 1280),
    "4:3": (1280, 896),
    "9:16": (768, 1408),
    "16:9": (1408, 768),
}
FLASH_IMAGE_PIXELS = {
    "1:1": (1024, 1024),
    "2:3": (832, 1248),
    "3:2": (1248, 832),
    "3:4": (864, 1184),
    "4:3": (1184, 864),
    "4:5": (896, 1152),
    "5:4": (1152, 896),
    "9:16": (768, 1344),
    "16:9": (1344, 768),
    "21:9": (1536, 672),
}
# Imagen models that take `sampleImageSize` (fast makes 1K only and refuses the field).
SAMPLE_IMAGE_SIZE_MODELS = frozenset({"imagen-4.0-generate-001", "imagen-4.0-ultra-generate-001"})
# Finish reasons that mean the provider's moderation stopped the image.
BLOCKED_FINISH_REASONS = frozenset(
    {
        "SAFETY",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "RECITATION",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
# Google answers a key it does not accept with 400 INVALID_ARGUMENT; that is the gateway's own
# credential failing (503), not the client's request.
CREDENTIAL_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
# Imagen's prompt pre-filter rejects with a 400 whose message names Google's RAI practices;
# to the client that is a blocked generation (200, flagged), not a bad request.
RAI_MARKERS = ("Responsible AI", "usage guidelines")


def _error_body(response: httpx.Response) -> dict:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _reasons(error: dict) -> set[str]:
    details = error.get("details")
    if not isinstance(details, list):
        return set()
    return {
        d["reason"] for d in details if isinstance(d, dict) and isinstance(d.get("reason"), str)
    }


def estimate_tokens(text: str) -> int:
    """Google's rule of thumb (about 4 characters a token), used only when counting fails."""
    return math.ceil(len(text) / 4)


class GeminiTransport(ResponsesOverChat, Transport):
    kind = "gemini"
    checks_requests = True

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"x-goog-api-key": route.connection.api_key}

    def error_message(self, response: httpx.Response) -> str:
        error = _error_body(response)
        if isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error.get("status"), str):
            return error["status"]
        return super().error_message(response)

    def content_blocked(self, response: httpx.Response) -> bool:
        message = self.error_message(response)
        return any(marker in message for marker in RAI_MARKERS)

    def raise_for_response(self, response: httpx.Response) -> None:
        if response.status_code == 400 and _reasons(_error_body(response)) & CREDENTIAL_REASONS:
            raise unavailable("gemini rejected the connection's api key")
        super().raise_for_response(response)

    def _path(self, model: str, method: str) -> str:
        return f"/models/{quote(model, safe='.-_')}:{method}"

    # --- chat ------------------------------------------------------------------------------

    def check_chat(self, route: Route, payload: dict) -> None:
        gemini_chat.check_request(payload)

    async def chat(self, route: Route, payload: dict) -> dict:
        body = gemini_chat.gemini_request(payload)
        path = self._path(route.upstream_model, "generateContent")
        answer = await self.post_json(route, path, body, max_bytes=self.answer_cap("chat"))
        if not isinstance(answer, dict):
            raise malformed("generateContent answer is not an object")
        return gemini_chat.chat_answer(answer, payload)

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream:
        body = gemini_chat.gemini_request(payload)
        path = self._path(route.upstream_model, "streamGenerateContent") + "?alt=sse"
        response = await self.open_stream(route, path, body)

        def decoder(max_event: int) -> TranslatingDecoder:
            return TranslatingDecoder(SSEFrames(max_event), gemini_chat.GeminiChatEvents(payload))

        return UpstreamStream(response, decoder)

    # --- images ----------------------------------------------------------------------------

    async def generate_images(self, route: Route, body):
        family = route.model.options.get("family") if route.model is not None else None
        if family is None:  # a model the catalog does not know, forwarded by a pin
            family = "imagen" if route.upstream_model.startswith("imagen") else "flash-image"
        if family == "imagen":
            return await self._imagen(route, body)
        return await self._flash_image(route, body)

    async def _imagen(self, route: Route, body):

        aspect = nearest_aspect_ratio(body.size, IMAGEN_ASPECT_RATIOS)
        parameters = {"sampleCount": body.n, "aspectRatio": aspect, "includeRaiReason": True}
        scale = 1
        if route.upstream_model in SAMPLE_IMAGE_SIZE_MODELS:
            parsed = parse_size(body.size)
            two_k = parsed is not None and max(parsed) > 1024
            parameters["sampleImageSize"] = "2K" if two_k else "1K"
            scale = 2 if two_k else 1
        payload = {"instances": [{"prompt": body.prompt}], "parameters": parameters}
        try:
            answer = await self.post_json(
                route,
                self._path(route.upstream_model, "predict"),
                payload,
                max_bytes=self.answer_cap("images", body.n),
            )
        except ContentBlocked:
            return GeneratedImages(flagged=True)
        predictions = answer.get("predictions") if isinstance(answer, dict) else None
        if predictions is not None and not isinstance(predictions, list):
            raise malformed("imagen predictions is not a list")
        images = [
            GeneratedImage(b64_json=item["bytesBase64Encoded"])
            for item in predictions or ()
            if isinstance(item, dict) and isinstance(item.get("bytesBase64Encoded"), str)
        ]
        # Filtered predictions carry only `raiFilteredReason`; the ones that passed are kept.
        width, height = IMAGEN_PIXELS[aspect]
        return GeneratedImages(
            images=images,
            flagged=not images,
            size=f"{width * scale}x{height * scale}",
        )

    async def _flash_image(self, route: Route, body):
        aspect = nearest_aspect_ratio(body.size, FLASH_IMAGE_ASPECT_RATIOS)
        answer = await self.post_json(
            route,
            self._path(route.upstream_model, "generateContent"),
            flash_image_payload(body, aspect),
            max_bytes=self.answer_cap("images", body.n),
        )
        return flash_images(answer, aspect)

    # --- embeddings --------------------------------------------------------------------------

    async def embed(self, route: Route, texts: list[str], *, batch: bool, options: dict):
        """The vectors of `texts` and the input tokens billed for them.

        `options` holds Gemini's per-request fields (`taskType`, `title`,
        `outputDimensionality`). Tokens are counted by `:countTokens` alongside the embedding
        call; if only the count fails, the embeddings are still returned and billed on an
        estimate rather than lost.
        """
        model = route.upstream_model
        if batch:
            name = f"models/{model}"
            call = self.post_json(
                route,
                self._path(model, "batchEmbedContents"),
                {
                    "requests": [
                        {"model": name, "content": {"parts": [{"text": t}]}, **options}
                        for t in texts
                    ]
                },
                max_bytes=self.answer_cap("embeddings", len(texts)),
            )
        else:
            call = self.post_json(
                route,
                self._path(model, "embedContent"),
                {"content": {"parts": [{"text": texts[0]}]}, **options},
                max_bytes=self.answer_cap("embeddings"),
            )
        counting = asyncio.ensure_future(self._count_tokens(route, texts, options.get("title")))
        try:
            answer = await call
        except BaseException:
            counting.cancel()
            raise
        tokens = await counting
        try:
            if batch:
                vectors = [item["values"] for item in answer["embeddings"]]
            else:
                vectors = [answer["embedding"]["values"]]
        except (KeyError, TypeError) as exc:
            raise malformed("embed answer without vectors") from exc
        if len(vectors) != len(texts) or not all(isinstance(v, list) for v in vectors):
            raise malformed("embed vectors do not match the texts")
        return vectors, tokens

    async def _count_tokens(self, route: Route, texts: list[str], title: str | None) -> int:
        # The title is embedded with each text, so it is input the provider bills per text.
        counted = [[title, text] if title else [text] for text in texts]
        payload = {
            "contents": [
                {"role": "user", "parts": [{"text": t} for t in parts]} for parts in counted
            ]
        }
        try:
            answer = await self.post_json(
                route, self._path(route.upstream_model, "countTokens"), payload
            )
            return usage_formats.gemini_count(answer)
        except ProviderFailure as exc:
            logger.warning(
                "gemini countTokens failed (%s); billing %s on an estimate",
                getattr(exc, "message", type(exc).__name__),
                route.upstream_model,
            )
            return sum(estimate_tokens(t) for parts in counted for t in parts)


# --- flash-image: images from generateContent ---------------------------------------------------


def flash_image_payload(body, aspect: str) -> dict:
    """The generateContent request of an image generation at the given aspect ratio."""
    config: dict = {
        "responseModalities": ["TEXT", "IMAGE"],
        "imageConfig": {"aspectRatio": aspect},
    }
    if body.n > 1:
        # The model makes one image per call and refuses more candidates itself (400):
        # per-model maximums are the provider's to enforce.
        config["candidateCount"] = body.n
    return {
        "contents": [{"role": "user", "parts": [{"text": body.prompt}]}],
        "generationConfig": config,
    }


def flash_images(answer, aspect: str) -> GeneratedImages:
    """The images of a generateContent answer; a blocked prompt or candidate, or an answer
    without an image (a text-only refusal), is flagged: no charge."""
    if not isinstance(answer, dict):
        raise malformed("flash-image answer is not an object")
    feedback = answer.get("promptFeedback") or {}
    candidates = answer.get("candidates") or []
    if not isinstance(feedback, dict) or not isinstance(candidates, list):
        raise malformed("flash-image promptFeedback or candidates")
    parts = None if feedback.get("blockReason") else _flash_image_parts(candidates)
    if parts is None:
        return GeneratedImages(flagged=True)
    texts, images = parts
    metadata = answer.get("usageMetadata")
    input_tokens = output_tokens = None  # no counts: billed per megapixel
    if isinstance(metadata, dict) and metadata.get("candidatesTokenCount") is not None:
        usage = usage_formats.gemini(metadata)
        input_tokens, output_tokens = usage.prompt_tokens, usage.completion_tokens
    revised = "".join(texts).strip() or None
    width, height = FLASH_IMAGE_PIXELS[aspect]
    return GeneratedImages(
        images=[GeneratedImage(b64_json=data, revised_prompt=revised) for data in images],
        flagged=not images,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        size=f"{width}x{height}",
    )


def _flash_image_parts(candidates: list) -> tuple[list[str], list[str]] | None:
    """The candidates' texts and images (base64), thoughts left out; None when a candidate was
    blocked."""
    texts: list[str] = []
    images: list[str] = []
    for candidate in candidates:
        if not isinstance(candidate, dict):
            continue
        if candidate.get("finishReason") in BLOCKED_FINISH_REASONS:
            return None
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict) or part.get("thought"):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            inline = part.get("inlineData")
            if isinstance(inline, dict) and isinstance(inline.get("data"), str):
                images.append(inline["data"])
    return texts, images

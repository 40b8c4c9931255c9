"""`direct`: the OpenAI REST API (Bearer key; base URL like https://api.openai.com/v1)."""

from __future__ import annotations

import asyncio
import base64
from typing import ClassVar

import httpx
import orjson

from catalog.routing import Route
from inference.imagesizes import nearest_size

from . import usage as usage_formats
from .base import (
    ContentBlocked,
    GeneratedImage,
    GeneratedImages,
    ModerationResult,
    Transport,
    UpstreamStream,
    busy,
    malformed,
    unavailable,
)
from .pool import UpstreamBusy, UpstreamTooLarge


class OpenAITransport(Transport):
    kind = "openai"

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"Authorization": f"Bearer {route.connection.api_key}"}

    async def embeddings(self, route: Route, payload: dict) -> dict:
        items = payload["input"]
        cap = self.answer_cap("embeddings", len(items) if isinstance(items, list) else 1)
        return await self.post_json(route, "/embeddings", payload, max_bytes=cap)

    async def moderate(self, route: Route, texts: list[str]) -> list[ModerationResult]:
        """The moderation endpoint's verdict on each text (the moderation guardrail)."""
        answer = await self.post_json(
            route, "/moderations", {"model": route.upstream_model, "input": texts}
        )
        results = answer.get("results") if isinstance(answer, dict) else None
        if (
            not isinstance(results, list)
            or len(results) != len(texts)
            or not all(isinstance(r, dict) and isinstance(r.get("flagged"), bool) for r in results)
        ):
            raise malformed("moderation answer without results")
        return [_moderation_result(result) for result in results]

    # --- images ------------------------------------------------------------------------------

    def content_blocked(self, response: httpx.Response) -> bool:
        return _error_code(response) in MODERATION_CODES

    async def generate_images(self, route: Route, body):

        payload, size, quality = image_payload(route, body)
        try:
            answer = await self.post_json(
                route, "/images/generations", payload, max_bytes=self.answer_cap("images", body.n)
            )
        except ContentBlocked:
            return GeneratedImages(flagged=True)
        items = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise malformed("images data")
        # The retired models answer with short-lived URLs; clients only ever get base64.
        encoded = await asyncio.gather(*(self._image_b64(route, item) for item in items))
        images = [
            GeneratedImage(
                b64_json=data,
                revised_prompt=item.get("revised_prompt")
                if isinstance(item.get("revised_prompt"), str)
                else None,
            )
            for item, data in zip(items, encoded, strict=True)
        ]
        usage = usage_formats.openai_images(answer.get("usage"))
        created = answer.get("created")
        answered_size = answer.get("size")
        return GeneratedImages(
            images=images,
            created=created if isinstance(created, int) and not isinstance(created, bool) else 0,
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            size=answered_size if _is_pixel_size(answered_size) else size,
            quality=answer.get("quality") if isinstance(answer.get("quality"), str) else quality,
        )

    async def _image_b64(self, route: Route, item: dict) -> str:
        if isinstance(item.get("b64_json"), str):
            return item["b64_json"]
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise malformed("image item without b64_json or url")
        # Pre-signed: the connection's key is not sent along.
        try:
            response = await self.upstream(route.connection).download(
                url, max_bytes=self.answer_cap("images")
            )
        except UpstreamBusy as exc:
            raise busy(f"{self.kind} image download waited past the budget for {exc}") from exc
        except UpstreamTooLarge as exc:
            raise unavailable(f"{self.kind} image download {exc}", "too_large") from exc
        except httpx.TimeoutException as exc:
            raise unavailable(f"{self.kind} image download timed out") from exc
        except httpx.TransportError as exc:
            raise unavailable(f"{self.kind} image download failed: {type(exc).__name__}") from exc
        if response.status_code != 200 or not response.content:
            raise unavailable(f"{self.kind} image download answered {response.status_code}")
        return base64.b64encode(response.content).decode("ascii")

    # --- chat completions and responses ---------------------------------------------------

    stateful_responses = True
    responses_include: ClassVar[frozenset[str] | None] = None  # every documented value

    def chat_payload(self, payload: dict) -> dict:
        """OpenAI's chat API takes the effort as `reasoning_effort` and has no `exclude`."""
        reasoning = payload.pop("reasoning", None)
        if reasoning is not None:
            payload["reasoning_effort"] = reasoning["effort"]
        return payload

    def responses_payload(self, payload: dict) -> dict:
        effort = payload.pop("reasoning_effort", None)
        if effort is not None:
            payload["reasoning"] = {"effort": effort}
        if isinstance(payload.get("reasoning"), dict):
            payload["reasoning"].pop("exclude", None)
        return payload

    async def chat(self, route: Route, payload: dict) -> dict:
        cap = self.answer_cap("chat")
        return await self.post_json(
            route, "/chat/completions", self.chat_payload(payload), max_bytes=cap
        )

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream:
        # The contract's chunks already: relayed as they come (no decoder of its own).
        return UpstreamStream(
            await self.open_stream(route, "/chat/completions", self.chat_payload(payload))
        )

    async def responses(self, route: Route, payload: dict) -> dict:
        return await self.post_json(
            route, "/responses", self.responses_payload(payload), max_bytes=self.answer_cap("chat")
        )

    async def responses_stream(self, route: Route, payload: dict) -> UpstreamStream:
        return UpstreamStream(
            await self.open_stream(route, "/responses", self.responses_payload(payload))
        )


# --- images: the request each model family takes -----------------------------------------------

MODERATION_CODES = frozenset({"moderation_blocked", "content_policy_violation"})
GPT_IMAGE_SIZES = ("1024x1024", "1536x1024", "1024x1536")
GPT_IMAGE_QUALITY = {"standard": "medium", "hd": "high"}  # low, medium, high, auto as sent
DALL_E_SIZES = {
    "dall-e-3": ("1024x1024", "1792x1024", "1024x1792"),
    "dall-e-2": ("256x256", "512x512", "1024x1024"),
}
DALL_E_3_QUALITY = {"low": "standard", "medium": "standard", "high": "hd"}  # auto: the default
GPT_IMAGE_ONLY = ("background", "output_format", "output_compression", "moderation")


def error_object(response: httpx.Response) -> dict:
    """The `error` object of an OpenAI-shaped error body (empty when there is none)."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error_code(response: httpx.Response) -> str | None:
    code = error_object(response).get("code")
    return code if isinstance(code, str) else None


def _is_pixel_size(value) -> bool:
    if not isinstance(value, str):
        return False
    width, _, height = value.partition("x")
    return width.isdigit() and height.isdigit()


def image_family(route: Route) -> str | None:
    """`gpt-image` (token-priced), `dall-e` (retired), or None for a model the catalog does not
    know and whose id says nothing (then only the common fields are sent)."""
    family = route.model.options.get("family") if route.model is not None else None
    if family is None and route.upstream_model.startswith("gpt-image"):
        family = "gpt-image"
    if family is None and route.upstream_model.startswith("dall-e"):
        family = "dall-e"
    return family


def image_payload(route: Route, body) -> tuple[dict, str | None, str | None]:
    """The Images API body for `body`, with the size and quality it asks for (for billing).

    `seed` and `negative_prompt` have no counterpart on this API and are never sent; `style`
    goes to the dall-e family only; the four `GPT_IMAGE_ONLY` fields to gpt-image only."""
    model = route.upstream_model
    family = image_family(route)
    payload: dict = {"model": model, "prompt": body.prompt, "n": body.n}
    size, quality = body.size, body.quality
    if family == "gpt-image":
        size = "auto" if body.size == "auto" else nearest_size(body.size, GPT_IMAGE_SIZES)
        quality = GPT_IMAGE_QUALITY.get(body.quality, body.quality)
        for name in GPT_IMAGE_ONLY:
            if getattr(body, name) is not None:
                payload[name] = getattr(body, name)
    elif family == "dall-e":
        sizes = DALL_E_SIZES.get(model, DALL_E_SIZES["dall-e-3"])
        size = nearest_size(body.size, sizes, default="1024x1024")
        if model == "dall-e-2":
            quality = None  # one quality only, and no parameter for it
        else:
            quality = DALL_E_3_QUALITY.get(body.quality, body.quality)
            quality = None if quality == "auto" else quality
        if body.style is not None:
            payload["style"] = body.style
    payload["size"] = size
    if quality is not None:
        payload["quality"] = quality
    if body.user is not None:
        payload["user"] = body.user
    if family == "dall-e" and model != "dall-e-2" and quality is None:
        quality = "standard"  # what the provider makes, and bills, by default
    return payload, size, quality


def _moderation_result(result: dict) -> ModerationResult:
    """One result; categories and scores of an unexpected type are left out, not trusted."""
    categories = result.get("categories")
    scores = result.get("category_scores")
    return ModerationResult(
        flagged=result["flagged"],
        categories={
            str(name): value
            for name, value in (categories.items() if isinstance(categories, dict) else ())
            if isinstance(value, bool)
        },
        category_scores={
            str(name): float(value)
            for name, value in (scores.items() if isinstance(scores, dict) else ())
            if isinstance(value, int | float) and not isinstance(value, bool)
        },
    )

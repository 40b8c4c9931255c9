"""`cloud`: AWS Bedrock Runtime `InvokeModel` (`POST /model/{modelId}/invoke`, the model id
URL-encoded), SigV4-signed with botocore's signer for service `bedrock` in the connection's
region; base URL like https://bedrock-runtime.us-east-1.amazonaws.com.

Images: titan-type and nova-type models share one body (`TEXT_IMAGE`), stability-type models
take theirs (one image per call, aspect-ratio sizes) and are served in one region only.
Embeddings: the titan and cohere bodies are forwarded as the client sent them.
Chat: `Converse` (`POST /model/{modelId}/converse`) and `ConverseStream` (`.../converse-stream`,
a binary event stream), translated by providers.converse; `/v1/responses` through that chat
(providers.bridge).
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from urllib.parse import quote, urlsplit

import httpx
import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from catalog.routing import ConnectionInfo, Route
from core.errors import BadRequest
from inference.billing import Usage
from inference.imagesizes import nearest_aspect_ratio, nearest_size, parse_size

from . import converse
from . import usage as usage_formats
from .base import (
    ContentBlocked,
    GeneratedImage,
    GeneratedImages,
    Transport,
    UpstreamStream,
    malformed,
)
from .bridge import ResponsesOverChat
from .events import EventDecoder, TranslatingDecoder

SERVICE = "bedrock"
DEFAULT_REGION = "us-east-1"
_REGIONAL_HOST = re.compile(r"^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com$")

# Titan Image Generator v2: the width x height pairs it accepts (user guide, "image sizes").
TITAN_SIZES = (
    "1024x1024",
    "768x768",
    "512x512",
    "768x1152",
    "384x576",
    "1152x768",
    "576x384",
    "768x1280",
    "384x640",
    "1280x768",
    "640x384",
    "896x1152",
    "448x576",
    "1152x896",
    "576x448",
    "768x1408",
    "384x704",
    "1408x768",
    "704x384",
    "640x1408",
    "320x704",
    "1408x640",
    "704x320",
    "1152x640",
    "1173x640",
)
# Nova Canvas: each edge 320..4096 and a multiple of 16, ratio within 1:4..4:1, and at most
# 4,194,304 pixels (2048x2048).
NOVA_MAX_PIXELS = 2048 * 2048
NOVA_EDGE = (320, 4096)
STABILITY_ASPECT_RATIOS = ("1:1", "16:9", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21")
PREMIUM_QUALITIES = frozenset({"hd", "high"})
CONTENT_FILTER_MARKER = "content filters"


# --- regions and signing ---------------------------------------------------------------------


def signing_region(connection: ConnectionInfo) -> str:
    """The connection's region; else the one a regional endpoint URL names; else us-east-1."""
    if connection.region:
        return connection.region
    match = _REGIONAL_HOST.match(urlsplit(connection.base_url).hostname or "")
    return match.group(1) if match else DEFAULT_REGION


def _usable(connection: ConnectionInfo) -> bool:
    return bool(connection.aws_access_key_id and connection.aws_secret_access_key)


def invoke_path(model_id: str, operation: str = "invoke") -> str:
    # As AWS SDKs send it: every reserved character encoded (`:` -> %3A, an ARN's `/` -> %2F).
    return f"/model/{quote(model_id, safe='')}/{operation}"


# --- images: the body each model family takes --------------------------------------------------


def image_family(route: Route) -> str:
    family = route.model.options.get("family") if route.model is not None else None
    if family in ("titan", "nova", "stability"):
        return family
    model = route.upstream_model.rsplit("/", 1)[-1]  # an ARN ends with the model id
    if "stability." in model:
        return "stability"
    return "nova" if "nova-canvas" in model else "titan"


def _nova_size(size: str | None) -> str:
    parsed = parse_size(size)
    if parsed is None:
        return "1024x1024"
    width, height = parsed
    ratio = min(4.0, max(0.25, width / height))
    pixels = min(width * height, NOVA_MAX_PIXELS)
    exact_height = math.sqrt(pixels / ratio)
    exact_width = exact_height * ratio

    def edge(value: float) -> int:
        return int(min(NOVA_EDGE[1], max(NOVA_EDGE[0], value)) // 16 * 16)

    width, height = edge(exact_width), edge(exact_height)
    while width * height > NOVA_MAX_PIXELS:  # clamping the short edge up can overshoot
        if width >= height:
            width -= 16
        else:
            height -= 16
    return f"{width}x{height}"


def titan_image_body(family: str, body) -> tuple[dict, str, str]:
    """The `TEXT_IMAGE` body of titan-type and nova-type models, with the size and quality it
    asks for (they decide the price)."""
    size = _nova_size(body.size) if family == "nova" else nearest_size(body.size, TITAN_SIZES)
    quality = "premium" if body.quality in PREMIUM_QUALITIES else "standard"
    parsed = parse_size(size)
    assert parsed is not None, size  # both size choosers return WxH
    width, height = parsed
    params: dict = {"text": body.prompt}
    if body.negative_prompt is not None:
        params["negativeText"] = body.negative_prompt
    config: dict = {"numberOfImages": body.n, "quality": quality, "width": width, "height": height}
    if body.seed is not None:
        config["seed"] = body.seed
    payload = {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": params,
        "imageGenerationConfig": config,
    }
    return payload, size, quality


def stability_image_body(body) -> dict:
    """Stability models make one image per call and have no count field: `n` is not sent, and a
    request for more gets one image (the spec's maximum for them is 1)."""
    payload: dict = {
        "prompt": body.prompt,
        "aspect_ratio": nearest_aspect_ratio(body.size, STABILITY_ASPECT_RATIOS),
        "output_format": "png",
    }
    if body.negative_prompt is not None:
        payload["negative_prompt"] = body.negative_prompt
    if body.seed is not None:
        payload["seed"] = body.seed
    return payload


def stability_size(aspect_ratio: str) -> str:
    """The pixel size of a 1-megapixel image at `aspect_ratio` (for megapixels in usage)."""
    a, b = (int(part) for part in aspect_ratio.split(":"))
    height = math.sqrt(1024 * 1024 * b / a)
    return f"{round(height * a / b / 64) * 64}x{round(height / 64) * 64}"


def _answer_id(headers) -> str:
    """Converse answers carry no id: the request id AWS logs it under (CloudTrail, support)."""
    return "chatcmpl-" + (headers.get("x-amzn-requestid") or uuid.uuid4().hex)


class BedrockTransport(ResponsesOverChat, Transport):
    kind = "bedrock"
    aiohttp_transport = False  # SigV4 signs the %-encoded path that aiohttp would re-quote
    stream_accept = "application/vnd.amazon.eventstream"
    checks_requests = True

    # --- routing, signing, errors -------------------------------------------------------------

    def refine_route(self, route: Route) -> Route:
        """A model restricted to one region (catalog option `region`) is served by a connection
        in that region: the chosen one if it is there; else, when the request did not pin a
        connection, the provider's first other connection (by name) in that region; else 400."""
        wanted = route.model.options.get("region") if route.model is not None else None
        if not wanted or signing_region(route.connection) == wanted:
            return route
        if not route.connection_pinned:
            for connection in route.provider.connections.values():
                if signing_region(connection) == wanted and _usable(connection):
                    return dataclasses.replace(route, connection=connection)
        raise BadRequest(
            f"Model '{route.requested_model}' is only available in region '{wanted}', and "
            f"connection '{route.connection.name}' is in "
            f"'{signing_region(route.connection)}'; configure a '{route.provider.slug}' "
            f"connection in '{wanted}'"
        )

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        connection = route.connection
        request = AWSRequest(method=method, url=url, data=body)
        credentials = Credentials(connection.aws_access_key_id, connection.aws_secret_access_key)
        SigV4Auth(credentials, SERVICE, signing_region(connection)).add_auth(request)
        # Host and the payload hash are signed; httpx sends the same host and bytes.
        return {
            name: value
            for name, value in request.headers.items()
            if name.lower() in ("authorization", "x-amz-date", "x-amz-security-token")
        }

    def error_message(self, response: httpx.Response) -> str:
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return response.text[:500]
        if isinstance(body, dict):
            for key in ("message", "Message"):
                if isinstance(body.get(key), str):
                    return body[key]
        return ""

    def content_blocked(self, response: httpx.Response) -> bool:
        return CONTENT_FILTER_MARKER in self.error_message(response).lower()

    async def invoke(self, route: Route, payload: dict, max_bytes: int | None = None):
        path = invoke_path(route.upstream_model)
        return await self.request(route, "POST", path, json=payload, max_bytes=max_bytes)

    async def invoke_json(
        self, route: Route, payload: dict, max_bytes: int | None = None
    ) -> tuple[dict, httpx.Headers]:
        response = await self.invoke(route, payload, max_bytes)
        try:
            answer = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise malformed("bedrock answered invalid JSON") from exc
        if not isinstance(answer, dict):
            raise malformed("bedrock answer is not an object")
        return answer, response.headers

    # --- images --------------------------------------------------------------------------------

    async def generate_images(self, route: Route, body):

        family = image_family(route)
        try:
            if family == "stability":
                return await self._stability(route, body)
            return await self._titan(route, body, family)
        except ContentBlocked:
            return GeneratedImages(flagged=True)

    async def _titan(self, route: Route, body, family: str):

        payload, size, quality = titan_image_body(family, body)
        answer, _ = await self.invoke_json(route, payload, self.answer_cap("images", body.n))
        images = answer.get("images")
        error = answer.get("error")
        if not images and isinstance(error, str) and CONTENT_FILTER_MARKER in error.lower():
            return GeneratedImages(flagged=True)
        if not isinstance(images, list) or not images or error:
            raise malformed("titan answer without images")
        if not all(isinstance(image, str) for image in images):
            raise malformed("titan image is not a string")
        # The answer names no seed: the one sent is the one used (null when none was sent).
        return GeneratedImages(
            images=[GeneratedImage(b64_json=image, seed=body.seed) for image in images],
            size=size,
            quality=quality,
        )

    async def _stability(self, route: Route, body):

        payload = stability_image_body(body)
        answer, _ = await self.invoke_json(route, payload, self.answer_cap("images", body.n))
        reasons = [r for r in answer.get("finish_reasons") or () if r is not None]
        if any(isinstance(r, str) and r.lower().startswith("filter reason") for r in reasons):
            return GeneratedImages(flagged=True)  # "Filter reason: prompt" / "... output image"
        if reasons:  # "Inference error"
            raise malformed("stability inference error")
        images = answer.get("images")
        if not isinstance(images, list) or not images:
            raise malformed("stability answer without images")
        seeds = answer.get("seeds")
        seeds = seeds if isinstance(seeds, list) else []
        items = []
        for index, image in enumerate(images):
            if not isinstance(image, str):
                raise malformed("stability image is not a string")
            seed = seeds[index] if index < len(seeds) else None
            items.append(
                GeneratedImage(
                    b64_json=image,
                    seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                )
            )
        return GeneratedImages(images=items, size=stability_size(payload["aspect_ratio"]))

    # --- native embeddings ----------------------------------------------------------------------

    async def invoke_embeddings(self, route: Route, payload: dict) -> tuple[dict, Usage]:
        """The model's own answer and the input tokens it reports."""
        texts = payload.get("texts")  # cohere: a list; titan: one `inputText`
        count = len(texts) if isinstance(texts, list) else 1
        answer, headers = await self.invoke_json(
            route, payload, self.answer_cap("embeddings", count)
        )
        return answer, usage_formats.bedrock_embeddings(answer, headers)

    # --- chat: Converse and ConverseStream ------------------------------------------------------

    @staticmethod
    def _claude(route: Route) -> bool:
        options = route.model.options if route.model is not None else {}
        return converse.is_claude(route.upstream_model, options)

    def check_chat(self, route: Route, payload: dict) -> None:
        converse.check_converse(payload, claude=self._claude(route))

    def converse_plan(self, route: Route, payload: dict) -> converse.Plan:
        options = route.model.options if route.model is not None else {}
        return converse.converse_request(
            payload,
            claude=self._claude(route),
            native_json=options.get("structured_output") == "native",
            cache_system=options.get("prompt_cache") is True,
        )

    async def chat(self, route: Route, payload: dict) -> dict:
        plan = self.converse_plan(route, payload)
        response = await self.request(
            route,
            "POST",
            invoke_path(route.upstream_model, "converse"),
            json=plan.body,
            max_bytes=self.answer_cap("chat"),
        )
        try:
            answer = orjson.loads(response.content)
            if not isinstance(answer, dict):
                raise ValueError("not an object")
            return converse.chat_answer(
                answer, plan, model=payload["model"], answer_id=_answer_id(response.headers)
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # orjson: ValueError
            raise malformed(f"converse answer: {exc}") from exc

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream:
        plan = self.converse_plan(route, payload)
        response = await self.open_stream(
            route, invoke_path(route.upstream_model, "converse-stream"), plan.body
        )
        answer_id, model = _answer_id(getattr(response, "headers", {})), payload["model"]

        def decoder(max_event: int) -> EventDecoder:
            translator = converse.StreamTranslator(plan, model=model, answer_id=answer_id)
            return TranslatingDecoder(converse.EventStreamFrames(max_event), translator)

        return UpstreamStream(response, decoder)

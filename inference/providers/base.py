"""One `Transport` owns the HTTP side of every provider: pooled clients, time-outs, and the
spec's mapping of provider statuses. Each wire protocol is a small subclass.

Provider status -> client status:
    400, 422              -> 400 with the provider's (sanitized) message
    404                   -> 404 with the provider's (sanitized) message
    401, 403, 429, 5xx,
    time-out, no connection -> 503 "Service temporarily unavailable" (retryable)
    anything else         -> 500 "An error occurred"
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import httpx
import orjson
from django.conf import settings

from catalog.routing import ConnectionInfo, Route
from core import clock
from core.config import AnswerKind
from core.errors import (
    PROVIDER_ERROR,
    BadRequest,
    GatewayError,
    NotFound,
    ServiceUnavailable,
)

from .events import DecoderFactory
from .pool import Upstream, UpstreamBusy, UpstreamTimeout, UpstreamTooLarge, UpstreamUnreachable

if TYPE_CHECKING:
    from inference.billing import Usage

logger = logging.getLogger("gateway")

_URL = re.compile(r"\b(?:https?|wss?|ftp)://[^\s'\"<>)]+|\bwww\.[^\s'\"<>)]+", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_PROVIDER_NAMES = re.compile(
    r"(?<![\w./-])(?:OpenAI|OpenRouter|Azure|Amazon Bedrock|Amazon|AWS|Bedrock|Google|Gemini|"
    r"Vertex AI|Vertex|Anthropic|Claude|Stability AI|Stability|Cohere|Imagen|Titan|Nova|"
    r"Microsoft|Mistral AI|Mistral|vLLM|Ollama|Hugging Face)(?![\w/-])",
    re.IGNORECASE,
)


def scrub(text: str) -> str:
    """Without URLs (they may carry keys) and e-mail addresses (people)."""
    return _EMAIL.sub("", _URL.sub("", text))


def sanitize_message(message: str) -> str:
    """Provider messages reach clients without URLs, e-mail addresses or provider names."""
    text = scrub(message)
    text = _PROVIDER_NAMES.sub("", text)
    text = re.sub(r"\(\s*\)|\[\s*\]", "", text)
    text = re.sub(r"\s{2,}", " ", text).strip()
    text = re.sub(r"\s+([.,;:])", r"\1", text)
    return text or PROVIDER_ERROR


class ProviderFailure(GatewayError):
    """A failed provider call, already mapped to the client's status."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retryable: bool,
        reason: str | None = None,
        kind: str = "other",
        provider_fault: bool = True,
    ):
        super().__init__(message, status=status, reason=reason)
        self.retryable = retryable
        # Whether the connection failed (counted against its circuit when retryable); False when
        # the provider was never called: a wait for our own pool (docs/routing.md).
        self.provider_fault = provider_fault
        # A 429's Retry-After in seconds: how long the connection's circuit stays open.
        self.retry_after: float | None = None
        # What went wrong at the provider, for gateway_upstream_errors_total: timeout,
        # connection, status_4xx / status_5xx (the provider's own status), malformed, unavailable.
        self.upstream_kind = kind


class ContentBlocked(ProviderFailure):
    """A 400 from the provider's own content moderation. Endpoints that do not look for it see
    an ordinary 400; the image endpoint answers it with a flagged entry."""


# Contract chat fields some providers have no control for, with the values that ask for nothing
# (the default): any other value would change the answer, so an adapter without the control
# refuses it before the call (`refuse_unsupported`, from its `check_chat`).
CHAT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "frequency_penalty": (None, 0),
    "presence_penalty": (None, 0),
}


def unsupported(field: str) -> BadRequest:
    return BadRequest(f"'{field}' is not supported by this provider")


def refuse_unsupported(payload: dict, fields: tuple[str, ...] | None = None) -> None:
    """The spec's 400 for the first of `fields` (keys of CHAT_DEFAULTS; all of them when None)
    the payload sets to something other than its default."""
    for name in CHAT_DEFAULTS if fields is None else fields:
        if payload.get(name) not in CHAT_DEFAULTS[name]:
            raise unsupported(name)


def unavailable(reason: str, kind: str = "unavailable") -> ProviderFailure:
    logger.warning("provider unavailable: %s", reason)
    return ProviderFailure(
        ServiceUnavailable().message, status=503, retryable=True, reason=reason, kind=kind
    )


def busy(reason: str) -> ProviderFailure:
    """No slot of our own pool for the connection within the pool-wait budget (the license's
    share, or the worker's pool): the spec's 503, retried on another connection (another pool),
    but never held against this one: its provider was not called."""
    logger.info("upstream pool busy: %s", reason)
    return ProviderFailure(
        ServiceUnavailable().message,
        status=503,
        retryable=True,
        reason=reason,
        kind="pool_wait",
        provider_fault=False,
    )


def malformed(reason: str = "") -> ProviderFailure:
    """A provider answer the gateway cannot read (500 "An error occurred", not retryable):
    `raise malformed("why") from exc`. The reason goes to the log, never to the client."""
    reason = f"malformed provider answer: {reason or 'unreadable'}"
    logger.warning("%s", reason)
    return ProviderFailure(
        PROVIDER_ERROR, status=500, retryable=False, reason=reason, kind="malformed"
    )


RETRY_AFTER_MAX = 3600.0  # a provider's Retry-After never parks a connection longer


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (seconds or an HTTP date), bounded; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):  # e.g. an hour of 10**11
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - clock.now()
    if seconds != seconds or seconds <= 0:  # NaN, or already past
        return None
    return min(seconds, RETRY_AFTER_MAX)


class Transport:
    """Base class of a provider adapter. Subclasses set `kind` and implement the capabilities
    (the protocols below) of the endpoints their provider serves."""

    kind: ClassVar[str] = ""
    # aiohttp re-quotes a URL's path; a protocol that signs the exact path (SigV4) keeps httpcore.
    aiohttp_transport: ClassVar[bool] = True
    # The media type a stream's answer is asked in (`Accept` of `open_stream`).
    stream_accept: ClassVar[str] = "text/event-stream"
    # Whether `previous_response_id` and `item_reference` work (the provider stores responses).
    stateful_responses: ClassVar[bool] = False
    # The Responses `include` values the provider honours; None: every documented one.
    responses_include: ClassVar[frozenset[str] | None] = None

    # Whether `check_chat` / `check_responses` refuse anything (the endpoints build the payload
    # for them in step 7 only then: OpenAI's own kinds take every field the contract has).
    checks_requests: ClassVar[bool] = False

    def check_chat(self, route: Route, payload: dict) -> None:
        """Refuse, with the spec's 400 (`BadRequest`), what this provider cannot take (a field
        with no counterpart that would change the answer), before any call: step 7, for the
        chosen route and for each failover (one that refuses is skipped). `payload` is what
        `chat` would get."""

    def check_responses(self, route: Route, payload: dict) -> None:
        """`check_chat` for `/v1/responses` (`payload` is what `responses` would get)."""

    def refine_route(self, route: Route) -> Route:
        """The route this adapter serves the request on (e.g. another connection of the same
        provider in the one region a model is served in); raises the 400 when none can."""
        return route

    def __init__(self):
        self._upstreams: dict[tuple, Upstream] = {}

    # --- pools: one per connection row, rebuilt only when the row changes ---------------------

    def upstream(self, connection: ConnectionInfo) -> Upstream:
        key = (connection.name, connection.base_url, connection.updated_at)
        upstream = self._upstreams.get(key)
        if upstream is None:
            upstream = self._upstreams[key] = Upstream(
                timeout=connection.timeout, aiohttp_transport=self.aiohttp_transport
            )
            for old in [k for k in self._upstreams if k[:2] == key[:2] and k != key]:
                self._upstreams.pop(old).close_when_idle()  # superseded by an edit
        return upstream

    @staticmethod
    def answer_cap(kind: AnswerKind = "default", count: int = 1) -> int:
        """The most bytes read of a provider's answer (docs/decisions/README.md, "Upstream bounds"):
        `ANSWER_MAX_BYTES[kind]`, per input for embeddings and per image for images (`count`)."""
        return settings.GATEWAY["ANSWER_MAX_BYTES"][kind] * max(1, count)

    def client(self, connection: ConnectionInfo) -> httpx.AsyncClient:
        """httpx over the connection's pool (streams, downloads)."""
        return self.upstream(connection).http

    async def aclose(self) -> None:
        for upstream in self._upstreams.values():
            await upstream.aclose()
        self._upstreams.clear()

    # --- requests ----------------------------------------------------------------------------

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {}

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
        """One call; its answer read up to `max_bytes` (default: `answer_cap()`), else 503 (an
        answer too large to hold is a provider failure, recorded and not charged)."""
        url = route.connection.base_url + path
        content = orjson.dumps(json) if json is not None else b""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(self.auth_headers(route, method, url, content))
        try:
            response = await self.upstream(route.connection).request(
                method,
                url,
                content=content,
                headers=headers,
                params=params,
                max_bytes=max_bytes or self.answer_cap(),
            )
        except UpstreamBusy as exc:
            raise busy(f"{self.kind} waited past the budget for {exc}") from exc
        except UpstreamTimeout as exc:
            raise unavailable(f"{self.kind} timeout: {exc}", "timeout") from exc
        except UpstreamUnreachable as exc:
            raise unavailable(f"{self.kind} transport error: {exc}", "connection") from exc
        except UpstreamTooLarge as exc:
            raise unavailable(f"{self.kind} {exc}", "too_large") from exc
        self.raise_for_response(response)
        return response

    async def open_stream(self, route: Route, path: str, body: Any):
        """POST and return the answer once its headers are in, body unread (an
        `httpx.Response` or a `pool.StreamedAnswer`: `status_code`, `aiter_raw()`, `aclose()`).

        A failure status is read and mapped here, so that it reaches the client as a normal
        JSON error before any stream opens."""
        url = route.connection.base_url + path
        content = orjson.dumps(body)
        headers = {"Content-Type": "application/json", "Accept": self.stream_accept}
        headers.update(self.auth_headers(route, "POST", url, content))
        try:
            response = await self.upstream(route.connection).stream(
                url, content=content, headers=headers, max_bytes=self.answer_cap("stream")
            )
        except UpstreamBusy as exc:
            raise busy(f"{self.kind} waited past the budget for {exc}") from exc
        except UpstreamTimeout as exc:
            raise unavailable(f"{self.kind} timeout: {exc}", "timeout") from exc
        except UpstreamUnreachable as exc:
            raise unavailable(f"{self.kind} transport error: {exc}", "connection") from exc
        except UpstreamTooLarge as exc:  # the error body of a failure status
            raise unavailable(f"{self.kind} {exc}", "too_large") from exc
        except httpx.HTTPError as exc:  # the error body of a failure status was unreadable
            raise unavailable(f"{self.kind} error body unreadable") from exc
        self.raise_for_response(response)
        return response

    async def post_json(self, route: Route, path: str, body: Any, **kwargs) -> Any:
        response = await self.request(route, "POST", path, json=body, **kwargs)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise malformed(f"{self.kind} answered invalid JSON") from exc

    # --- status mapping ------------------------------------------------------------------------

    def error_message(self, response: httpx.Response) -> str:
        """The provider's own message from its error body (protocols override)."""
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return response.text[:500]
        if isinstance(body, dict):
            error = body.get("error", body)
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return error["message"]
            if isinstance(error, str):
                return error
            if isinstance(body.get("message"), str):
                return body["message"]
        return ""

    def content_blocked(self, response: httpx.Response) -> bool:
        """Whether a 400/422 is the provider's content moderation (protocols override)."""
        return False

    def raise_for_response(self, response: httpx.Response) -> None:
        status = response.status_code
        if status < 300:
            return
        kind = f"status_{min(status // 100, 5)}xx"
        if status in (400, 422):
            failure = ContentBlocked if self.content_blocked(response) else ProviderFailure
            message = sanitize_message(self.error_message(response))
            raise failure(message, status=400, retryable=False, kind=kind)
        if status == 404:
            message = sanitize_message(self.error_message(response))
            raise ProviderFailure(message, status=404, retryable=False, kind=kind)
        if status in (401, 403, 429) or status >= 500:
            down = unavailable(f"{self.kind} answered {status}", kind)
            if status == 429:
                down.retry_after = retry_after_seconds(response.headers.get("retry-after"))
            raise down
        reason = f"{self.kind} answered unmapped status {status}"
        logger.warning("%s", reason)
        raise ProviderFailure(PROVIDER_ERROR, status=500, retryable=False, reason=reason, kind=kind)


# --- capabilities: what an endpoint asks of an adapter ------------------------------------------


@dataclass
class UpstreamStream:
    """A streamed answer whose headers are in and status checked, its body unread: `response`
    (an `httpx.Response` or a `pool.StreamedAnswer`) and the adapter's `decoder` of it into
    the contract's events (`providers.events`; None: the upstream speaks them already)."""

    response: Any
    decoder: DecoderFactory | None = None


@runtime_checkable
class ChatProvider(Protocol):
    """`/v1/chat/completions`. `payload` is the contract's request (the validated body, tools
    in the function format, `model` the upstream id, `stream_options.include_usage` set on a
    stream); the answer is the contract's chat completion, its `usage` the contract's
    (`events.contract_usage`), and a stream's decoder yields the contract's chunks, ending
    with a usage-only chunk and `[DONE]`. Failures are `ProviderFailure`s (`raise_for_response`)."""

    checks_requests: bool

    def check_chat(self, route: Route, payload: dict) -> None: ...

    async def chat(self, route: Route, payload: dict) -> dict: ...

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream: ...


@runtime_checkable
class ResponsesProvider(Protocol):
    """`/v1/responses`, natively or through the adapter's chat (`providers.bridge`). The
    payload and answer are the contract's Responses shapes; a stream's decoder yields the
    contract's Responses events, ending with `response.completed` (its usage)."""

    stateful_responses: bool
    responses_include: frozenset[str] | None
    checks_requests: bool

    def check_responses(self, route: Route, payload: dict) -> None: ...

    async def responses(self, route: Route, payload: dict) -> dict: ...

    async def responses_stream(self, route: Route, payload: dict) -> UpstreamStream: ...


@runtime_checkable
class EmbeddingsProvider(Protocol):
    """OpenAI-shaped embeddings (`/v1/embeddings`)."""

    async def embeddings(self, route: Route, payload: dict) -> dict: ...


@dataclass
class GeneratedImage:
    b64_json: str
    revised_prompt: str | None = None
    seed: int | None = None


@dataclass
class GeneratedImages:
    """What an adapter got back from its provider, in neutral terms."""

    images: list[GeneratedImage] = field(default_factory=list)
    created: int = 0
    flagged: bool = False  # the provider's moderation blocked the generation
    input_tokens: int | None = None  # token-priced models only
    output_tokens: int | None = None
    size: str | None = None  # the size the images were made at (for per-size prices)
    quality: str | None = None  # the quality they were made at (for per-quality prices)


@runtime_checkable
class ImageProvider(Protocol):
    async def generate_images(self, route: Route, body) -> GeneratedImages: ...


@runtime_checkable
class BedrockEmbedder(Protocol):
    """`/v1/bedrock/embeddings`: the model's own body and answer, and its usage."""

    async def invoke_embeddings(self, route: Route, payload: dict) -> tuple[dict, Usage]: ...


@runtime_checkable
class GeminiEmbedder(Protocol):
    """`/v1/gemini/embeddings`: the vectors of `texts` and the input tokens billed."""

    async def embed(
        self, route: Route, texts: list[str], *, batch: bool, options: dict
    ) -> tuple[list[list[float]], int]: ...


__all__ = [
    "BedrockEmbedder",
    "ChatProvider",
    "EmbeddingsProvider",
    "GeminiEmbedder",
    "ImageProvider",
    "ResponsesProvider",
    "BadRequest",
    "ContentBlocked",
    "NotFound",
    "ProviderFailure",
    "Transport",
    "UpstreamStream",
    "busy",
    "malformed",
    "sanitize_message",
    "unavailable",
]


@runtime_checkable
class Searcher(Protocol):
    """`/v1/web-search`: the hits of one query (web or academic)."""

    async def search(self, route: Route, body) -> list: ...


@runtime_checkable
class PageFetcher(Protocol):
    """`/v1/fetch`: one entry per URL, fetched by the gateway itself."""

    async def fetch_pages(self, urls: list[str], *, max_characters: int, fmt: str, allowed): ...


@dataclass(frozen=True)
class ModerationResult:
    """One text's verdict from a moderation endpoint: flagged or not, and by category (OpenAI's
    `categories` and `category_scores`; a category the provider did not name is absent)."""

    flagged: bool
    categories: dict[str, bool] = field(default_factory=dict)
    category_scores: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Moderator(Protocol):
    """The moderation guardrail: one result per text, in the texts' order."""

    async def moderate(self, route: Route, texts: list[str]) -> list[ModerationResult]: ...

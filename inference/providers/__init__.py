"""Provider adapters, one per wire protocol, each a singleton holding its pooled clients."""

from .base import Transport
from .bedrock import BedrockTransport
from .fetch import FetchTransport
from .gemini import GeminiTransport
from .openai import OpenAITransport
from .openrouter import OpenRouterTransport
from .search import BraveTransport, OpenAlexTransport

_ADAPTERS: dict[str, Transport] = {}
_CLASSES: dict[str, type[Transport]] = {
    cls.kind: cls
    for cls in (
        OpenAITransport,
        OpenRouterTransport,
        BedrockTransport,
        GeminiTransport,
        BraveTransport,
        OpenAlexTransport,
        FetchTransport,
    )
}


def adapter_for(kind: str) -> Transport | None:
    adapter = _ADAPTERS.get(kind)
    if adapter is None and kind in _CLASSES:
        adapter = _ADAPTERS[kind] = _CLASSES[kind]()
    return adapter


def refined_route(route):
    """The route as its provider's adapter refines it (`refine_route`), e.g. another connection
    of the same provider in the one region a model is served in. Raises the 400 otherwise."""
    refine = getattr(adapter_for(route.provider.kind), "refine_route", None)
    return refine(route) if refine is not None else route

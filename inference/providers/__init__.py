"""Provider adapters, one per wire protocol, each a singleton holding its pooled clients."""

from .base import Transport
from .openai import OpenAITransport
from .openrouter import OpenRouterTransport

_ADAPTERS: dict[str, Transport] = {}
_CLASSES: dict[str, type[Transport]] = {
    cls.kind: cls for cls in (OpenAITransport, OpenRouterTransport)
}


def adapter_for(kind: str) -> Transport | None:
    adapter = _ADAPTERS.get(kind)
    if adapter is None and kind in _CLASSES:
        adapter = _ADAPTERS[kind] = _CLASSES[kind]()
    return adapter

"""Provider adapters, one per wire protocol, each a singleton holding its pooled clients.

An endpoint asks for the capability it needs (a protocol in `.base`); an adapter without it,
or a provider kind without an adapter, is a configuration error (500, logged), never a probe.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, TypeVar, overload

from catalog.registry import PROVIDER_KINDS

from .base import Transport, malformed
from .pool import close_retired


def adapter_class(kind: str) -> type[Transport]:
    """The Transport subclass catalog.registry names for `kind` (imported on first use)."""
    module, _, name = PROVIDER_KINDS[kind].adapter.rpartition(".")
    return getattr(import_module(module), name)


# Imported at start, as the routing may pick any kind on the first request.
_CLASSES: dict[str, type[Transport]] = {kind: adapter_class(kind) for kind in PROVIDER_KINDS}
_ADAPTERS: dict[str, Transport] = {}
_CAPABLE: dict[tuple[str, type], bool] = {}

T = TypeVar("T")


@overload
def adapter_for(kind: str) -> Transport: ...
@overload
def adapter_for(kind: str, capability: type[T]) -> T: ...


def adapter_for(kind: str, capability: type[Any] = Transport) -> Any:
    """The adapter of provider kind `kind`, checked to have `capability`."""
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        if kind not in _CLASSES:
            raise malformed(f"no adapter for provider kind {kind!r}")
        adapter = _ADAPTERS[kind] = _CLASSES[kind]()
    key = (kind, capability)
    capable = _CAPABLE.get(key)
    if capable is None:
        capable = _CAPABLE[key] = isinstance(adapter, capability)
    if not capable:
        raise malformed(f"provider kind {kind!r} has no {capability.__name__}")
    return adapter


def refined_route(route):
    """The route as its provider's adapter refines it (Transport.refine_route)."""
    return adapter_for(route.provider.kind).refine_route(route)


async def close_adapters() -> None:
    """Close every adapter's connection pools (shutdown, tests)."""
    for adapter in list(_ADAPTERS.values()):
        await adapter.aclose()
    await close_retired()

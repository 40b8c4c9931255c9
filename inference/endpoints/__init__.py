"""The endpoints: a module per service (or per family of services), each holding a django-ninja
`router` and the `pipeline.Operation` subclasses its views run. catalog.registry.SERVICES names
each operation by its dotted path; these helpers resolve them for the API and the policy."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from catalog.registry import SERVICES, Service

if TYPE_CHECKING:
    from ..pipeline import Operation


def operation_class(service: Service) -> type[Operation]:
    module, _, name = service.operation.rpartition(".")
    return getattr(import_module(module), name)


def service_routers() -> list[Any]:
    """The routers of the declared services, once each, in the registry's order."""
    modules = dict.fromkeys(s.operation.rpartition(".")[0] for s in SERVICES)
    return [import_module(module).router for module in modules]

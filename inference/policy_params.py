"""Tells licensing which parameters each policy service's request carries, and how to parse a
body exactly as the endpoint does (the policy editor's name check and "try a request" panel).
Called once from InferenceConfig.ready."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from catalog.registry import SERVICES
from core.jsonio import json_invalid_item, parse_json
from licensing.rules.policy_schema import BodyInvalid, register_service

from .endpoints import operation_class


def service_bodies() -> dict[str, Any]:
    """Each policy service's request model (its operation's `body`), by service name."""
    return {s.service: operation_class(s).body for s in SERVICES}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a (possibly optional, union or annotated) annotation names."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            args = args[:1]
        return [model for arg in args for model in _models_in(arg)]
    return []


def parameter_names(body: Any) -> set[str]:
    """Top-level fields, and one level of nested object fields as `outer.inner`."""
    names: set[str] = set()
    for model in _models_in(body):
        for name, info in model.model_fields.items():
            names.add(name)
            for nested in _models_in(info.annotation):
                names.update(f"{name}.{inner}" for inner in nested.model_fields)
    return names


def _loads(text: str) -> Any:
    """JSON exactly as the API reads it (core.jsonio), errors as its 422."""
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise BodyInvalid([json_invalid_item(exc)]) from exc


def _parser(body: Any):
    adapter = TypeAdapter(body)

    def parse(text: str) -> dict:
        if not text.strip():  # as the API answers an empty body
            raise BodyInvalid([{"type": "missing", "loc": ["body"], "msg": "Field required"}])
        data = _loads(text)
        try:
            value = adapter.validate_python(data)
        except ValidationError as exc:
            raise BodyInvalid(
                [
                    {
                        "type": error["type"],
                        "loc": ["body", *error["loc"]],
                        "msg": error["msg"],
                        "input": error.get("input"),
                    }
                    for error in exc.errors(include_url=False, include_context=False)
                ]
            ) from exc
        return value.model_dump(exclude_unset=True)

    return parse


def register_policy_parameters() -> None:
    for service, body in service_bodies().items():
        register_service(service, params=parameter_names(body), parse=_parser(body))

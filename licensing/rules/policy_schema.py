"""The request parameters each policy service knows, registered by the layer that owns the
request schemas (inference, at startup) so that licensing never imports it.

Policy documents are checked against these names when they are saved
(policy.check_param_names: a rule on `max_tokenz` would never match a request, so it is refused
with the list of known names); a service nobody registered is not checked. The "try a request"
panel parses a body with the registered parser, exactly as the API would, before the policy looks
at it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# service -> parameter names (dotted for nested fields, e.g. "reasoning.effort")
_known: dict[str, frozenset[str]] = {}
# service -> parser of a JSON text: returns the fields the request carries (what the pipeline
# gives the policy), or raises BodyInvalid with the API's 422 detail items.
_parsers: dict[str, Callable[[str], dict]] = {}


class BodyInvalid(ValueError):
    def __init__(self, detail: list[dict]):
        super().__init__("invalid body")
        self.detail = detail


def register_service(
    service: str, *, params: Iterable[str], parse: Callable[[str], dict] | None = None
) -> None:
    _known[service] = frozenset(params)
    if parse is not None:
        _parsers[service] = parse


def known_params(service: str) -> frozenset[str] | None:
    return _known.get(service)


def parser_for(service: str) -> Callable[[str], dict] | None:
    return _parsers.get(service)

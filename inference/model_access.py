"""Which catalog models a caller can use: what GET /v1/models lists and GET /v1/models/{id}
answers (docs/decisions/README.md, "Which models `GET /v1/models` lists").

A listed catalog entry is usable when, for at least one service its `supported_features` map
to, a request for it would pass the caller's policy and the provider selection:
- the license policy enables the service and its rules admit the model id (the request's own
  check, `Policy.check_request` on `{"model": id}`);
- `select_route`, with the providers the policy allows for the service and the caller's
  `X-Service-Provider` pin, chooses an active row whose connection has credentials (the
  request's own step 7: the credentials check of its kind, catalog.registry).

The answer is computed once per (license, pin) for a catalog snapshot and a policy, and kept
until either changes (or the cache's TTL ends): the request path never runs it.
"""

from __future__ import annotations

from catalog.registry import SERVICES
from catalog.routing import Catalog, ModelEntry, ProviderPin, select_route
from core.errors import GatewayError
from core.localcache import TTLCache
from licensing.rules.policy import Policy

from .schemas.common import MODEL_ID_MAX_LENGTH

# A catalog feature -> the (policy service, internal endpoint, required output modality) a
# request for the model may go to (catalog.registry: each service's `feature`). Embedding
# models are served by /v1/embeddings or by a native endpoint, whichever their provider speaks.
FEATURE_SERVICES: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    feature: tuple(
        (s.service, s.endpoint, s.output_modality) for s in SERVICES if s.feature == feature
    )
    for feature in dict.fromkeys(s.feature for s in SERVICES)
}

_usable_cache = TTLCache("usable-models", max_entries=10_000)


def usable_models(
    catalog: Catalog,
    policy: Policy | None,
    pin: ProviderPin | None,
    *,
    license_id: int,
    course_id: int | None = None,
) -> dict[str, ModelEntry]:
    """The entries the caller can use, by id, in catalog order. A course credential's answer
    (its course's policy) is kept apart from its license's."""
    key = (license_id, pin) if course_id is None else (license_id, pin, course_id)
    cached = _usable_cache.get(key)
    if cached is not None and cached[0] is catalog and cached[1] is policy:
        return cached[2]
    generation = _usable_cache.generation
    usable = {
        model_id: entry
        for model_id, entry in catalog.models.items()
        if entry.listed and _usable(catalog, policy, pin, entry)
    }
    _usable_cache.set(key, (catalog, policy, usable), generation)
    return usable


def _usable(
    catalog: Catalog, policy: Policy | None, pin: ProviderPin | None, entry: ModelEntry
) -> bool:
    if policy is None:  # cannot be evaluated: every request is a 503
        return False
    for feature in entry.supported_features:
        for service, endpoint, output_modality in FEATURE_SERVICES.get(feature, ()):
            try:
                service_policy = policy.check_request(service, {"model": entry.model_id})
                select_route(
                    catalog,
                    endpoint=endpoint,
                    model=entry.model_id,
                    pin=pin,
                    allowed=service_policy.providers,
                    output_modality=output_modality,
                    tags=policy.connection_tags,
                    pick=False,
                )
            except GatewayError:
                continue
            return True
    return False


def model_not_found(model: str) -> str:
    """The 404 of GET /v1/models/{id}: the same for an unknown id and one the caller cannot use
    (which models exist beyond the caller's own is not told)."""
    shown = model if len(model) <= MODEL_ID_MAX_LENGTH else model[:MODEL_ID_MAX_LENGTH] + "..."
    return f"The model '{shown}' does not exist or you do not have access to it"

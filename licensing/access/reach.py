"""Which models a policy lets its holders use, and where their requests may go: the same
test as GET /v1/models (inference.model_access, which licensing may not import) on the catalog
and the provider selection the gateway really uses (catalog.routing). Read by the student
portal's data-flow page and the privacy pack (licensing.privacy.report); no query but the
catalog's snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog.registry import SERVICES, Service, purposes_in_words
from catalog.routing import (
    Catalog,
    ModelEntry,
    ProviderPin,
    Route,
    Routes,
    select_routes,
)
from core.errors import GatewayError

from ..rules.policy import Policy, ServicePolicy


@dataclass(frozen=True)
class Destination:
    provider: str
    connection: str
    tags: tuple[str, ...]
    region: str


@dataclass
class ModelAccess:
    model_id: str
    services: list[str] = field(default_factory=list)
    destinations: list[Destination] = field(default_factory=list)

    @property
    def purpose(self) -> str:
        """What the student may use it for, in words: "chat and responses", "images"."""
        return purposes_in_words(self.services)


def models_reached(
    catalog: Catalog, policy: Policy, *, listed_only: bool = True
) -> list[ModelAccess]:
    """The catalog models (the listed ones unless `listed_only` is off) the policy lets its
    holders use, and for each where a request for it may go: for a service the model's
    features map to, the policy admits `{"model": id}` and provider selection finds a route.
    Where it may go: every route of the unpinned request (first and failovers) and of the
    request pinned to each of the model's providers (X-Service-Provider), with the residency
    tags applied."""
    found: list[ModelAccess] = []
    for model_id, entry in catalog.models.items():
        if listed_only and not entry.listed:
            continue
        access = _model_access(catalog, policy, model_id, entry)
        if access.services:
            found.append(access)
    return found


# A model id no catalog holds: what a request for a model the catalog does not know meets.
UNKNOWN_MODEL = "model-not-in-the-catalog"


def unknown_model_access(catalog: Catalog, policy: Policy) -> ModelAccess:
    """Where a request for a model the catalog does not know may go (it is forwarded unchanged
    to the service's default provider, or to the provider a header pins), for the services
    whose policy admits such a model: none when every service names its models. A model rule
    of patterns is judged on UNKNOWN_MODEL alone (the privacy pack says so)."""
    pins = [None, *(ProviderPin(slug, None) for slug in catalog.providers)]
    search = _ModelSearch(catalog, policy, ModelAccess(model_id=UNKNOWN_MODEL), pins)
    for service in SERVICES:
        try:
            service_policy = policy.check_request(service.service, {"model": UNKNOWN_MODEL})
        except GatewayError:
            continue
        if search.service_usable(service, service_policy):
            if service.service not in search.access.services:
                search.access.services.append(service.service)
    return search.access


def _model_access(
    catalog: Catalog, policy: Policy, model_id: str, entry: ModelEntry
) -> ModelAccess:
    """The services the policy admits the model on and finds a route for, and every place
    their requests may go."""
    search = _ModelSearch(catalog, policy, ModelAccess(model_id=model_id), _pins_of(entry))
    for service in SERVICES:
        if service.feature not in entry.supported_features:
            continue
        try:
            service_policy = policy.check_request(service.service, {"model": model_id})
        except GatewayError:
            continue
        usable = search.service_usable(service, service_policy)
        if usable and service.service not in search.access.services:
            search.access.services.append(service.service)
    return search.access


def _pins_of(entry: ModelEntry) -> list[ProviderPin | None]:
    """The unpinned request (None), then one pinned to each of the model's providers."""
    pins: list[ProviderPin | None] = [None]
    pins += [ProviderPin(slug, None) for slug in dict.fromkeys(r.provider for r in entry.rows)]
    return pins


@dataclass
class _ModelSearch:
    """Where one model's requests may go, searched service by service: the destinations found
    so far go into `access`, each once, in the order found."""

    catalog: Catalog
    policy: Policy
    access: ModelAccess
    pins: list[ProviderPin | None]
    seen: set[Destination] = field(default_factory=set)

    def service_usable(self, service: Service, service_policy: ServicePolicy) -> bool:
        """Whether the unpinned request finds a route; the routes of every request, pinned
        or not, are destinations."""
        usable = False
        for pin in self.pins:
            routes = self._routes(service, service_policy, pin)
            if routes is None:
                continue
            if pin is None:
                usable = True
            for route in routes:
                self._add(route)
        return usable

    def _routes(
        self, service: Service, service_policy: ServicePolicy, pin: ProviderPin | None
    ) -> Routes | None:
        try:
            return select_routes(
                self.catalog,
                endpoint=service.endpoint,
                model=self.access.model_id,
                pin=pin,
                allowed=service_policy.providers,
                output_modality=service.output_modality,
                tags=self.policy.connection_tags,
                pick=False,
            )
        except GatewayError:
            return None  # no route for this request: others may have one

    def _add(self, route: Route) -> None:
        destination = Destination(
            provider=route.provider.slug,
            connection=route.connection.name,
            tags=tuple(sorted(route.connection.tags)),
            region=route.connection.region,
        )
        if destination not in self.seen:
            self.seen.add(destination)
            self.access.destinations.append(destination)


def destinations_of(models: list[ModelAccess]) -> list[Destination]:
    """Every place any of the models' requests may go, once each, by provider."""
    unique = {d for m in models for d in m.destinations}
    return sorted(unique, key=lambda d: (d.provider, d.connection))

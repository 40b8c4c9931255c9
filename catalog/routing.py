"""Model -> provider rows: which provider and connection serve a request.

The whole catalog is small, so it is read in three queries and cached as one snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from core.crypto import UndecryptableSecret, reveal
from core.db import UNREACHABLE
from core.errors import BadRequest, ServiceUnavailable
from core.localcache import TTLCache

from .circuit import circuit_key, known_open
from .models import Connection, Model, Provider, ProviderModel, parse_tags
from .registry import (
    PROVIDER_KINDS,
    SERVICES,
    Credentials,
    credentials_present,
    kind_serves,
    missing_credential,
)

logger = logging.getLogger("gateway")

# Where a model the catalog does not know is forwarded when no header pins a provider.
DEFAULT_PROVIDER = {s.endpoint: s.default_provider for s in SERVICES}


@dataclass(frozen=True)
class ConnectionInfo:
    name: str
    base_url: str
    api_key: str
    region: str
    aws_access_key_id: str
    aws_secret_access_key: str
    timeout: float | None
    updated_at: float
    undecryptable: bool = False  # its credentials do not open with the configured keys
    weight: int = 1
    tags: frozenset[str] = frozenset()
    circuit: str = ""  # its circuit's key (catalog.circuit): provider, name and updated_at
    # Connection.options: a kind's own settings (Azure's deployments, ...)
    options: dict = field(default_factory=dict, hash=False, compare=False)

    def __repr__(self):  # credentials stay out of logs and tracebacks
        return f"<ConnectionInfo {self.name} {self.base_url}>"


BUILTIN_CONNECTION = ConnectionInfo(
    name="default",
    base_url="",
    api_key="",
    region="",
    aws_access_key_id="",
    aws_secret_access_key="",
    timeout=None,
    updated_at=0.0,
)


@dataclass(frozen=True)
class ProviderInfo:
    slug: str
    kind: str
    connections: dict[str, ConnectionInfo]

    def serves(self, endpoint: str) -> bool:
        return kind_serves(self.kind, endpoint)


@dataclass(frozen=True)
class ProviderRow:
    provider: str
    upstream_model_id: str
    active: bool
    priority: int


@dataclass(frozen=True)
class ModelEntry:
    model_id: str
    owned_by: str
    supported_features: tuple[str, ...]
    input_modality: dict
    output_modality: dict
    cost: dict
    options: dict
    listed: bool
    rows: tuple[ProviderRow, ...]

    def client_fields(self) -> dict:
        return {
            "id": self.model_id,
            "object": "model",
            "created": 0,
            "owned_by": self.owned_by,
            "supported_features": list(self.supported_features),
            "input_modality": self.input_modality,
            "output_modality": self.output_modality,
            "cost": self.cost,
        }


@dataclass(frozen=True)
class Catalog:
    providers: dict[str, ProviderInfo]
    models: dict[str, ModelEntry]
    # The providers serving each endpoint, found once per snapshot (a snapshot is never changed,
    # a new one replaces it): asking every provider on every request cost ~2 µs.
    _serving: dict[str, frozenset[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def serving(self, endpoint: str) -> frozenset[str]:
        """The slugs of the providers that serve `endpoint`."""
        slugs = self._serving.get(endpoint)
        if slugs is None:
            slugs = self._serving[endpoint] = frozenset(
                slug for slug, provider in self.providers.items() if provider.serves(endpoint)
            )
        return slugs


@dataclass(frozen=True)
class Route:
    """The outcome of provider selection."""

    endpoint: str
    requested_model: str
    upstream_model: str
    provider: ProviderInfo
    connection: ConnectionInfo
    model: ModelEntry | None  # None: unknown to the catalog, forwarded unchanged
    connection_pinned: bool = False  # `X-Service-Provider: <provider>/<connection>`


@dataclass(frozen=True)
class ProviderPin:
    slug: str
    connection: str | None


_catalog_cache = TTLCache("catalog", max_entries=1)


def cached_catalog() -> Catalog | None:
    return _catalog_cache.get("catalog")


def load_catalog_snapshot() -> Catalog:
    cached = cached_catalog()
    if cached is not None:
        return cached
    try:
        return _load_catalog_snapshot()
    except UNREACHABLE:  # during an outage, the catalog last read (docs/reliability.md)
        stale = _catalog_cache.stale("catalog")
        if stale is None:
            raise
        return stale


def _load_catalog_snapshot() -> Catalog:
    generation = _catalog_cache.generation
    connections: dict[int, dict[str, ConnectionInfo]] = {}
    for c in Connection.objects.filter(active=True).select_related("provider"):
        connections.setdefault(c.provider_id, {})[c.name] = _connection_info(c)
    for by_name in connections.values():  # a provider's connections in failover order
        ordered = sorted(by_name.values(), key=lambda c: (-c.weight, c.name))
        by_name.clear()
        by_name.update((c.name, c) for c in ordered)
    providers_by_id = {
        p.pk: ProviderInfo(slug=p.slug, kind=p.kind, connections=connections.get(p.pk, {}))
        for p in Provider.objects.all()
    }
    rows: dict[int, list[ProviderRow]] = {}
    for r in ProviderModel.objects.all().order_by("priority", "pk"):
        rows.setdefault(r.model_id, []).append(
            ProviderRow(
                provider=providers_by_id[r.provider_id].slug,
                upstream_model_id=r.upstream_model_id,
                active=r.active,
                priority=r.priority,
            )
        )
    models = {
        m.model_id: ModelEntry(
            model_id=m.model_id,
            owned_by=providers_by_id[m.owned_by_id].slug,
            supported_features=tuple(m.supported_features or ()),
            input_modality=m.input_modality or {},
            output_modality=m.output_modality or {},
            cost=m.cost or {},
            options=m.options or {},
            listed=m.listed,
            rows=tuple(rows.get(m.pk, ())),
        )
        for m in Model.objects.all()
    }
    catalog = Catalog(providers={p.slug: p for p in providers_by_id.values()}, models=models)
    _catalog_cache.set("catalog", catalog, generation)
    return catalog


def _connection_info(c: Connection) -> ConnectionInfo:
    """The connection with its credentials decrypted (once per snapshot, not per request)."""
    try:
        api_key, aws_secret = reveal(c.api_key), reveal(c.aws_secret_access_key)
        undecryptable = False
    except UndecryptableSecret as exc:
        logger.error("connection %s/%s: %s", c.provider.slug, c.name, exc)
        api_key, aws_secret, undecryptable = "", "", True
    return ConnectionInfo(
        name=c.name,
        base_url=c.base_url.rstrip("/"),
        api_key=api_key,
        region=c.region,
        aws_access_key_id=c.aws_access_key_id,
        aws_secret_access_key=aws_secret,
        timeout=c.timeout,
        updated_at=c.updated_at.timestamp(),
        undecryptable=undecryptable,
        weight=c.weight,
        tags=frozenset(parse_tags(c.tags)),
        circuit=circuit_key(c.provider.slug, c.name, c.updated_at.timestamp()),
        options=c.options if isinstance(c.options, dict) else {},
    )


class ConnectionMisconfigured(BadRequest):
    """The spec's 400 for a chosen connection without usable credentials. Its message is the
    spec's and names only the connection; the provider and model are kept for the operator's
    log line (inference.pipeline), not sent to the client."""

    def __init__(self, provider: ProviderInfo, connection_name: str, model: str):
        what = missing_credential(provider.kind)
        super().__init__(f"Connection '{connection_name}' is misconfigured: missing {what}")
        self.provider = provider.slug
        self.connection = connection_name
        self.model = model
        self.missing = what


def _no_provider(endpoint: str, pinned: bool) -> BadRequest:
    if pinned:
        return BadRequest(f"No provider available for endpoint '{endpoint}' under the current pins")
    return BadRequest(f"No provider available for endpoint '{endpoint}'")


def select_routes(
    catalog: Catalog,
    *,
    endpoint: str,
    model: str,
    pin: ProviderPin | None,
    allowed: frozenset[str] | None,
    output_modality: str | None = None,
    tags: frozenset[str] = frozenset(),
    pick: bool = True,
) -> Routes:
    """The request's routes in the order they are tried (docs/routing.md): the first is where
    it goes, the others are its failovers. Raises the spec's 400 when there is none.

    The first route's provider is the model's owner, else its active row of lowest priority;
    its connection is chosen by weight among that provider's connections whose circuit is not
    known to be open (smooth weighted round-robin). Then come the provider's other connections,
    then the model's other active rows by priority, each with its connections by weight.
    `tags` (the license's data-residency rule) keeps only connections carrying all of them;
    a pinned connection has no failovers; a row that is reached only by its header
    (`Service.header_only`) is no failover for an unpinned request. `pick=False` (a question
    of whether the request could be served, GET /v1/models) leaves the weighted choice as is."""
    candidates = _candidates(catalog, endpoint, pin, allowed)
    entry = catalog.models.get(model)
    rows: list[tuple[str, str]]
    if entry is None:
        default = DEFAULT_PROVIDER.get(endpoint)
        rows = [(default if default in candidates else sorted(candidates)[0], model)]
    else:
        rows = _model_rows(entry, endpoint, model, candidates, pin is not None, output_modality)
    if pin is not None and pin.connection:
        return Routes(_pinned_route(catalog, endpoint, model, entry, rows[0], pin.connection, tags))
    header_only = _HEADER_ONLY.get(endpoint, frozenset()) if pin is None else frozenset()
    routes = _routes_by_rows(catalog, endpoint, model, entry, rows, tags, pick, header_only)
    if routes is None:
        raise _no_provider(endpoint, pinned=pin is not None)
    return routes


def _routes_by_rows(
    catalog: Catalog,
    endpoint: str,
    model: str,
    entry: ModelEntry | None,
    rows: list[tuple[str, str]],
    tags: frozenset[str],
    pick: bool,
    header_only: frozenset[str],
) -> Routes | None:
    """The routes from the first row with a usable connection (a header-only row only as the
    first), its failovers bound but built only if asked for; None when no row has one."""
    for index, (slug, upstream) in enumerate(rows):
        if index and slug in header_only:
            continue
        provider = catalog.providers[slug]
        connections = _first_row(provider, _connections(provider, tags), model, pick)
        if connections:
            first = _route(endpoint, model, upstream, provider, connections[0], entry)
            more = partial(
                _failovers,
                catalog,
                endpoint,
                model,
                entry,
                rows,
                index,
                connections,
                tags,
                header_only,
            )
            return Routes(first, more)
    return None


def _candidates(
    catalog: Catalog, endpoint: str, pin: ProviderPin | None, allowed: frozenset[str] | None
) -> frozenset[str]:
    """The providers that serve the endpoint and that the license allows, or only the pinned
    one (which must be among them); the spec's 400 when there is none."""
    serving = catalog.serving(endpoint)
    candidates = serving if allowed is None else serving & allowed
    if pin is not None:
        if pin.slug not in candidates:
            raise _no_provider(endpoint, pinned=True)
        return frozenset((pin.slug,))
    if not candidates:
        raise _no_provider(endpoint, pinned=False)
    return candidates


def _model_rows(
    entry: ModelEntry,
    endpoint: str,
    model: str,
    candidates: frozenset[str] | set[str],
    pinned: bool,
    output_modality: str | None,
) -> list[tuple[str, str]]:
    """A catalog model's (provider, upstream model id) among the candidates, in the order they
    are tried: its owner first, then its other active rows by priority."""
    if output_modality and not entry.output_modality.get(output_modality):
        raise BadRequest(
            f"No available provider for model '{model}' supports {output_modality} output"
        )
    eligible = [row for row in entry.rows if row.provider in candidates]
    if not eligible:
        raise _no_provider(endpoint, pinned=pinned)
    active = [row for row in eligible if row.active]
    if not active:
        raise BadRequest(f"No active provider for model '{model}'")
    # The owner first (a model owned by another provider is routed there), then priority.
    active.sort(key=lambda row: (row.provider != entry.owned_by, row.priority))
    return [(row.provider, row.upstream_model_id) for row in active]


def _pinned_route(
    catalog: Catalog,
    endpoint: str,
    model: str,
    entry: ModelEntry | None,
    row: tuple[str, str],
    name: str,
    tags: frozenset[str],
) -> Route:
    """The route of a pinned connection (`X-Service-Provider: <provider>/<connection>`): it
    must exist, carry the tags and have its credentials; it has no failovers."""
    slug, upstream = row
    provider = catalog.providers[slug]
    connection = provider.connections.get(name)
    if connection is None or not tags <= connection.tags:
        raise _no_provider(endpoint, pinned=True)
    _check_usable(provider, connection, model)
    return _route(endpoint, model, upstream, provider, connection, entry, pinned=True)


def _failovers(
    catalog: Catalog,
    endpoint: str,
    model: str,
    entry: ModelEntry | None,
    rows: list[tuple[str, str]],
    index: int,
    connections: list[ConnectionInfo],
    tags: frozenset[str],
    header_only: frozenset[str],
) -> Iterator[Route]:
    """The failovers of the route made of `rows[index]` and `connections[0]`, built only when
    that first attempt failed: the row's other connections, then the later rows' usable
    connections but those reached only by their header."""
    slug, upstream = rows[index]
    provider = catalog.providers[slug]
    for connection in connections[1:]:
        yield _route(endpoint, model, upstream, provider, connection, entry)
    for other, other_upstream in rows[index + 1 :]:
        if other in header_only:
            continue
        fallback = catalog.providers[other]
        for connection in _connections(fallback, tags):
            if _usable(fallback, connection):
                yield _route(endpoint, model, other_upstream, fallback, connection, entry)


class Routes:
    """A request's routes in attempt order: `first`, then (iterating) its failovers, which are
    built only if asked for."""

    __slots__ = ("first", "_more")

    def __init__(self, first: Route, more: Callable[[], Iterator[Route]] | None = None):
        self.first = first
        self._more = more

    def __iter__(self) -> Iterator[Route]:
        yield self.first
        if self._more is not None:
            yield from self._more()

    def failovers(self) -> Iterator[Route]:
        return self._more() if self._more is not None else iter(())


_HEADER_ONLY = {s.endpoint: s.header_only for s in SERVICES}


def select_route(catalog: Catalog, **kwargs) -> Route:
    """The first of `select_routes`: where the request goes when nothing fails."""
    return select_routes(catalog, **kwargs).first


def _route(endpoint, model, upstream, provider, connection, entry, pinned=False) -> Route:
    return Route(
        endpoint=endpoint,
        requested_model=model,
        upstream_model=upstream,
        provider=provider,
        connection=connection,
        model=entry,
        connection_pinned=pinned,
    )


def _connections(provider: ProviderInfo, tags: frozenset[str]) -> list[ConnectionInfo]:
    """The provider's active connections that carry every tag, in failover order (weight,
    then name); a kind the gateway serves itself has its implied connection, which keeps
    every request on the gateway's own host and so meets any residency rule."""
    if not provider.connections and _builtin(provider.kind):
        return [BUILTIN_CONNECTION]
    if not tags:
        return list(provider.connections.values())
    return [c for c in provider.connections.values() if tags <= c.tags]


def _first_row(
    provider: ProviderInfo, connections: list[ConnectionInfo], model: str, pick: bool
) -> list[ConnectionInfo]:
    """The first row's connections with the chosen one first. A row whose connections all lack
    credentials is the spec's 400 (a configuration error, not an outage to fail over from);
    with none at all, it names the `default` connection as before several existed."""
    if not connections:
        if not provider.connections:
            raise ConnectionMisconfigured(provider, "default", model)
        return []  # none carries the tags: the next row may
    usable = [c for c in connections if _usable(provider, c)]
    if not usable:
        _check_usable(provider, connections[0], model)
    if pick and len(usable) > 1:
        chosen = _pick(provider.slug, usable)
        if chosen is not usable[0]:
            usable.remove(chosen)
            usable.insert(0, chosen)
    return usable


def _usable(provider: ProviderInfo, connection: ConnectionInfo) -> bool:
    return not connection.undecryptable and credentials_present(
        provider.kind,
        api_key=connection.api_key,
        aws_access_key_id=connection.aws_access_key_id,
        aws_secret_access_key=connection.aws_secret_access_key,
    )


def _check_usable(provider: ProviderInfo, connection: ConnectionInfo, model: str) -> None:
    if connection.undecryptable:
        raise ServiceUnavailable()  # the gateway's own keys are wrong: logged at load
    if not _usable(provider, connection):
        raise ConnectionMisconfigured(provider, connection.name, model)


# Smooth weighted round-robin (nginx's): per provider and set of healthy connections, each
# connection's running score grows by its weight at every pick and the picked one's drops by
# the total. Deterministic, exact shares over every cycle of sum(weights) picks, no randomness
# on the hot path; state is per process (docs/routing.md, "Weights").
_scores: dict[tuple[str, tuple[str, ...]], dict[str, int]] = {}


def _pick(slug: str, connections: list[ConnectionInfo]) -> ConnectionInfo:
    healthy = [c for c in connections if c.weight > 0 and not known_open(c.circuit)]
    if not healthy:
        return connections[0]
    if len(healthy) == 1:
        return healthy[0]
    key = (slug, tuple(c.name for c in healthy))
    scores = _scores.get(key)
    if scores is None:
        if len(_scores) > 1000:  # sets of connections come and go with edits and outages
            _scores.clear()
        scores = _scores[key] = {}
    best, best_score, total = healthy[0], None, 0
    for connection in healthy:
        score = scores[connection.name] = scores.get(connection.name, 0) + connection.weight
        total += connection.weight
        if best_score is None or score > best_score:
            best, best_score = connection, score
    scores[best.name] -= total
    return best


def _builtin(kind: str) -> bool:
    spec = PROVIDER_KINDS.get(kind)
    return spec is not None and spec.credentials is Credentials.BUILTIN

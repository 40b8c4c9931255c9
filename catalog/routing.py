"""Model -> provider rows: which provider and connection serve a request.

The whole catalog is small, so it is read in three queries and cached as one snapshot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.crypto import UndecryptableSecret, reveal
from core.errors import BadRequest, ServiceUnavailable
from gateway_site.localcache import TTLCache

from .models import Connection, Model, Provider, ProviderModel
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


@dataclass(frozen=True)
class Route:
    """The outcome of provider selection."""

    endpoint: str
    requested_model: str
    upstream_model: str
    provider: ProviderInfo
    connection: ConnectionInfo
    model: ModelEntry | None  # None: unknown to the catalog, forwarded unchanged


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
    generation = _catalog_cache.generation
    connections: dict[int, dict[str, ConnectionInfo]] = {}
    for c in Connection.objects.filter(active=True).select_related("provider"):
        connections.setdefault(c.provider_id, {})[c.name] = _connection_info(c)
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


def select_route(
    catalog: Catalog,
    *,
    endpoint: str,
    model: str,
    pin: ProviderPin | None,
    allowed: frozenset[str] | None,
    output_modality: str | None = None,
) -> Route:
    """Choose provider, connection and upstream model id, or raise the spec's 400."""
    candidates = {
        slug
        for slug, provider in catalog.providers.items()
        if provider.serves(endpoint) and (allowed is None or slug in allowed)
    }
    if pin is not None:
        if pin.slug not in candidates:
            raise _no_provider(endpoint, pinned=True)
        candidates = {pin.slug}
    if not candidates:
        raise _no_provider(endpoint, pinned=False)

    entry = catalog.models.get(model)
    if entry is None:
        default = DEFAULT_PROVIDER.get(endpoint)
        slug = default if default in candidates else sorted(candidates)[0]
        upstream = model
    else:
        if output_modality and not entry.output_modality.get(output_modality):
            raise BadRequest(
                f"No available provider for model '{model}' supports {output_modality} output"
            )
        rows = [row for row in entry.rows if row.provider in candidates]
        if not rows:
            raise _no_provider(endpoint, pinned=pin is not None)
        active = [row for row in rows if row.active]
        if not active:
            raise BadRequest(f"No active provider for model '{model}'")
        # The owner first (a model owned by another provider is routed there), then priority.
        active.sort(key=lambda row: (row.provider != entry.owned_by, row.priority))
        slug, upstream = active[0].provider, active[0].upstream_model_id

    provider = catalog.providers[slug]
    connection_name = pin.connection if pin is not None and pin.connection else "default"
    connection = provider.connections.get(connection_name)
    if connection is None and connection_name == "default" and _builtin(provider.kind):
        connection = BUILTIN_CONNECTION
    if pin is not None and pin.connection and connection is None:
        raise _no_provider(endpoint, pinned=True)
    if connection is not None and connection.undecryptable:
        raise ServiceUnavailable()  # the gateway's own keys are wrong: logged at load
    if connection is None or not credentials_present(
        provider.kind,
        api_key=connection.api_key,
        aws_access_key_id=connection.aws_access_key_id,
        aws_secret_access_key=connection.aws_secret_access_key,
    ):
        raise ConnectionMisconfigured(provider, connection_name, model)
    return Route(
        endpoint=endpoint,
        requested_model=model,
        upstream_model=upstream,
        provider=provider,
        connection=connection,
        model=entry,
    )


def _builtin(kind: str) -> bool:
    spec = PROVIDER_KINDS.get(kind)
    return spec is not None and spec.credentials is Credentials.BUILTIN

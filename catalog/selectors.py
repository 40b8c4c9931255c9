"""Reads of the catalog for the operators' views: each connection with its circuit (the admin's
connection list and `GET /manage/v1/connections`; docs/routing.md, "Seeing it").

A page of connections reads every circuit in one call (`read_circuits`: one Redis pipeline, or
this process's own circuits without `REDIS_URL`), never one round trip per row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from django.db.models import Q

from core import clock

from .circuit import CLOSED, Circuit, circuit_key, read_circuits
from .models import Connection, Provider, ProviderModel
from .registry import PROVIDER_KINDS, SERVICES, Credentials, kind_serves


@dataclass(frozen=True)
class ConnectionHealth:
    """A connection's circuit as operators see it: `state` is "closed", "open" or "half_open";
    `open_until` is set while the circuit is open or half-open (its cool-down's end)."""

    state: str = CLOSED
    failures: int = 0
    last_error: str = ""
    last_error_at: datetime | None = None
    open_until: datetime | None = None


def _instant(epoch: float) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch else None


def health_of(circuit: Circuit | None, now: float) -> ConnectionHealth:
    if circuit is None:
        return ConnectionHealth()
    return ConnectionHealth(
        state=circuit.state(now),
        failures=circuit.failures,
        last_error=circuit.last_error,
        last_error_at=_instant(circuit.last_error_at),
        open_until=_instant(circuit.open_until),
    )


def connection_circuit_key(connection: Connection) -> str:
    """The key routing gives the connection's circuit (catalog.routing: provider, name and the
    `updated_at` that saving bumps, so a saved connection reads as a fresh, closed circuit)."""
    return circuit_key(connection.provider.slug, connection.name, connection.updated_at.timestamp())


def connections_health(connections: Iterable[Connection]) -> dict[int, ConnectionHealth]:
    """Connection id -> its circuit's health, for every connection given, in one read. The
    connections need their provider (`select_related("provider")`)."""
    keys = {connection.pk: connection_circuit_key(connection) for connection in connections}
    circuits = read_circuits(list(keys.values()))
    now = clock.now()
    return {pk: health_of(circuits.get(key), now) for pk, key in keys.items()}


def shown_base_url(url: str) -> str:
    """A base URL as the operators' views show it: scheme, host, port and path; never a
    user name or password (`https://user:secret@host`), query or fragment, where a key could
    have been written (`?key=...`)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def tagged(tag: str) -> Q:
    """Connections whose tags include `tag` (they are stored normalised: lower case, sorted,
    comma-separated, no spaces; catalog.models.Connection.clean)."""
    tag = tag.strip().lower()
    return (
        Q(tags=tag)
        | Q(tags__startswith=f"{tag},")
        | Q(tags__endswith=f",{tag}")
        | Q(tags__contains=f",{tag},")
    )


def _model_rows(**only):
    return (
        ProviderModel.objects.filter(model__listed=True, **only)
        .values_list(
            "model__model_id",
            "model__supported_features",
            "model__output_modality",
            "provider__kind",
            "provider__slug",
        )
        .order_by("model__model_id")
    )


def _services_of(features, output, kind) -> list[str]:
    """The policy services a provider row of this kind serves a model with these features and
    output modalities through (the feature is the service's, the output modality the service's
    when it requires one, and the kind speaks the endpoint)."""
    return [
        service.service
        for service in SERVICES
        if service.feature in (features or ())
        and (not service.output_modality or (output or {}).get(service.output_modality))
        and kind_serves(kind, service.endpoint)
    ]


def policy_choices() -> dict[str, list[str]]:
    """The policy form's model checklists: per policy service, the ids of the listed models
    a provider row (active or not: the form shows first what a connection serves now,
    `connected_catalog`) can serve through it, in id order. One query for the whole catalog."""
    choices: dict[str, list[str]] = {s.service: [] for s in SERVICES}
    for model_id, features, output, kind, _slug in _model_rows():
        for service in _services_of(features, output, kind):
            if model_id not in choices[service]:
                choices[service].append(model_id)
    return choices


@dataclass(frozen=True)
class Connected:
    """What the gateway can serve now, for the policy form: the providers with a connection a
    request may use (active, with its kind's credentials; a built-in kind always), the
    catalog's models per policy service that an active row on such a provider serves, and
    each provider's kind in words."""

    providers: frozenset[str]
    models: dict[str, frozenset[str]]
    provider_labels: dict[str, str]


def connected_catalog() -> Connected:
    """Two queries: the connections, and the active provider rows."""
    connected = {
        c.provider.slug
        for c in Connection.objects.filter(active=True).select_related("provider")
        if c.has_credentials
    }
    kinds = dict(Provider.objects.values_list("slug", "kind"))
    for slug, kind in kinds.items():
        spec = PROVIDER_KINDS.get(kind)
        if spec is not None and spec.credentials is Credentials.BUILTIN:
            connected.add(slug)  # served by the gateway itself: no connection row
    served: dict[str, set[str]] = {s.service: set() for s in SERVICES}
    for model_id, features, output, kind, slug in _model_rows(active=True):
        if slug in connected:
            for service in _services_of(features, output, kind):
                served[service].add(model_id)
    return Connected(
        providers=frozenset(connected),
        models={service: frozenset(ids) for service, ids in served.items()},
        provider_labels={
            slug: PROVIDER_KINDS[kind].label if kind in PROVIDER_KINDS else kind
            for slug, kind in kinds.items()
        },
    )


def service_providers() -> dict[str, list[str]]:
    """Per policy service, the catalog's providers whose kind speaks its endpoint (a policy's
    providers lists)."""
    providers = list(Provider.objects.order_by("slug").values_list("slug", "kind"))
    return {
        s.service: [slug for slug, kind in providers if kind_serves(kind, s.endpoint)]
        for s in SERVICES
    }

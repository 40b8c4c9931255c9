"""Writes to the catalog (operator commands and the admin call these)."""

from __future__ import annotations

from django.db import transaction

from .defaults import MODELS, PROVIDERS
from .models import Connection, Model, Provider, ProviderModel


@transaction.atomic
def catalog_load_defaults(*, reset_rows: bool = False) -> dict[str, int]:
    """Install the default catalog. Idempotent: prices, features and modalities are brought
    back to the defaults; the active flags of existing provider rows are kept (an operator may
    have enabled them) unless `reset_rows`."""
    counts = {"providers": 0, "models": 0, "rows": 0}
    providers = {}
    for slug, kind, description in PROVIDERS:
        provider, created = Provider.objects.update_or_create(
            slug=slug, defaults={"kind": kind, "description": description}
        )
        providers[slug] = provider
        counts["providers"] += created
    for spec in MODELS:
        model, created = Model.objects.update_or_create(
            model_id=spec["model_id"],
            defaults={
                "owned_by": providers[spec["owned_by"]],
                "supported_features": spec["supported_features"],
                "input_modality": spec["input_modality"],
                "output_modality": spec["output_modality"],
                "cost": spec["cost"],
                "options": spec["options"],
                "listed": spec.get("listed", True),
            },
        )
        counts["models"] += created
        for slug, upstream, active in spec["rows"]:
            row, created = ProviderModel.objects.get_or_create(
                model=model,
                provider=providers[slug],
                defaults={"upstream_model_id": upstream, "active": active},
            )
            counts["rows"] += created
            if not created and (reset_rows or row.upstream_model_id != upstream):
                row.upstream_model_id = upstream
                if reset_rows:
                    row.active = active
                row.save()
    return counts


@transaction.atomic
def connection_configure(
    *,
    provider_slug: str,
    name: str = "default",
    base_url: str,
    api_key: str | None = None,
    region: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    weight: int | None = None,
    tags: list[str] | None = None,
) -> Connection:
    """Create or update a connection; what is None stays as it is. Saving it gives it a new
    `updated_at`, which closes its circuit (inference.circuit keys its state by it)."""
    provider = Provider.objects.get(slug=provider_slug)
    connection, _ = Connection.objects.get_or_create(
        provider=provider, name=name, defaults={"base_url": base_url}
    )
    connection.base_url = base_url
    for field, value in (
        ("api_key", api_key),
        ("region", region),
        ("aws_access_key_id", aws_access_key_id),
        ("aws_secret_access_key", aws_secret_access_key),
        ("weight", weight),
        ("tags", ",".join(tags) if tags is not None else None),
    ):
        if value is not None:
            setattr(connection, field, value)
    connection.full_clean()
    connection.save()
    return connection

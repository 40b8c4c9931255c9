"""Writes to the catalog (operator commands and the admin call these)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.localcache import clear_all

from .defaults import MODELS, PROVIDERS
from .models import Connection, Model, Provider, ProviderModel, priced
from .registry import PROVIDER_KINDS, kind_serves


@transaction.atomic
def catalog_load_defaults(*, reset_rows: bool = False) -> dict[str, int]:
    """Install the default catalog. Idempotent: prices, features and modalities are brought
    back to the defaults; the active flags of existing provider rows are kept (an operator may
    have enabled them) unless `reset_rows`.

    Read in three queries and written in bulk (a few statements, whatever the catalog's size):
    a model per query made `load_catalog`, and every test that loads the catalog, take a few
    hundred queries. Bulk writes send no `post_save`, so the caches are cleared here."""
    providers, created_providers = _default_providers()
    models, created_models = _default_models(providers)
    created_rows = _default_rows(providers, models, reset_rows=reset_rows)
    clear_all()
    return {"providers": created_providers, "models": created_models, "rows": created_rows}


def _default_providers() -> tuple[dict[str, Provider], int]:
    existing = {p.slug: p for p in Provider.objects.filter(slug__in=[p[0] for p in PROVIDERS])}
    new, changed = [], []
    for slug, kind, description in PROVIDERS:
        provider = existing.get(slug)
        if provider is None:
            new.append(Provider(slug=slug, kind=kind, description=description))
        elif (provider.kind, provider.description) != (kind, description):
            provider.kind, provider.description = kind, description
            changed.append(provider)
    Provider.objects.bulk_create(new)
    Provider.objects.bulk_update(changed, ["kind", "description"])
    return {**existing, **{p.slug: p for p in new}}, len(new)


_MODEL_FIELDS = (
    "supported_features",
    "input_modality",
    "output_modality",
    "cost",
    "options",
    "listed",
)


def _model_values(spec: dict) -> dict:
    return {
        "supported_features": spec["supported_features"],
        "input_modality": spec["input_modality"],
        "output_modality": spec["output_modality"],
        "cost": spec["cost"],
        "options": spec["options"],
        "listed": spec.get("listed", True),
    }


def _default_models(providers: dict[str, Provider]) -> tuple[dict[str, Model], int]:
    ids = [spec["model_id"] for spec in MODELS]
    existing = {m.model_id: m for m in Model.objects.filter(model_id__in=ids)}
    new, changed = [], []
    now = timezone.now()
    for spec in MODELS:
        owner, values = providers[spec["owned_by"]], _model_values(spec)
        model = existing.get(spec["model_id"])
        if model is None:
            new.append(Model(model_id=spec["model_id"], owned_by=owner, **values))
            continue
        if model.owned_by_id != owner.pk or any(
            getattr(model, name) != value for name, value in values.items()
        ):
            model.owned_by = owner
            for name, value in values.items():
                setattr(model, name, value)
            model.updated_at = now
            changed.append(model)
    Model.objects.bulk_create(new)
    Model.objects.bulk_update(changed, ["owned_by", *_MODEL_FIELDS, "updated_at"])
    return {**existing, **{m.model_id: m for m in new}}, len(new)


def _default_rows(
    providers: dict[str, Provider], models: dict[str, Model], *, reset_rows: bool
) -> int:
    existing = {
        (row.model_id, row.provider_id): row
        for row in ProviderModel.objects.filter(model__in=list(models.values()))
    }
    new, changed = [], []
    for spec in MODELS:
        model = models[spec["model_id"]]
        for slug, upstream, active in spec["rows"]:
            provider = providers[slug]
            row = existing.get((model.pk, provider.pk))
            if row is None:
                new.append(
                    ProviderModel(
                        model=model, provider=provider, upstream_model_id=upstream, active=active
                    )
                )
            elif reset_rows or row.upstream_model_id != upstream:
                row.upstream_model_id = upstream
                if reset_rows:
                    row.active = active
                changed.append(row)
    ProviderModel.objects.bulk_create(new)
    ProviderModel.objects.bulk_update(changed, ["upstream_model_id", "active"])
    return len(new)


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
    options: dict | None = None,
) -> Connection:
    """Create or update a connection; what is None stays as it is. `options` are merged into
    the connection's (a key given None is removed). Saving it gives it a new `updated_at`,
    which closes its circuit (inference.circuit keys its state by it)."""
    provider = provider_of(provider_slug)
    if not isinstance(name, str) or not _SLUG.match(name):
        raise ValidationError(
            f"Invalid connection name {str(name)[:64]!r}: 1-64 letters, digits, '-' or '_'"
        )
    connection, _ = Connection.objects.get_or_create(
        provider=provider, name=name, defaults={"base_url": base_url}
    )
    connection.base_url = base_url
    for name_, value in (
        ("api_key", api_key),
        ("region", region),
        ("aws_access_key_id", aws_access_key_id),
        ("aws_secret_access_key", aws_secret_access_key),
        ("weight", weight),
        ("tags", ",".join(tags) if tags is not None else None),
    ):
        if value is not None:
            setattr(connection, name_, value)
    if options:
        merged = {**(connection.options or {}), **options}
        connection.options = {k: v for k, v in merged.items() if v is not None}
    connection.full_clean()
    connection.save()
    return connection


# --- operator commands of issue 34: providers, models, a connection's models ------------------

# The most a price may be (USD per 1M tokens == micro-credits per token): far above any list
# price, low enough that a typo like 1e400 or 2**64 is refused rather than billed.
MAX_PRICE = 100_000.0
CHAT_MODALITIES = ("text", "image", "audio", "video", "file")
EFFORTS = ("none", "low", "medium", "high")  # the contract's reasoning efforts
MODEL_ID_MAX = 200
MAX_SYNCED_MODELS = 1000
# Printable ASCII without spaces: the ids of OpenAI, Azure, vLLM (`org/Model-8B`), Ollama
# (`llama3.1:8b`); no NUL, controls, look-alike letters or surrogates.
_MODEL_ID = re.compile(rf"^[!-~]{{1,{MODEL_ID_MAX}}}$")
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}\Z")  # Provider.slug and Connection.name


def model_id_errors(value, label: str = "model id") -> list[str]:
    if not isinstance(value, str) or not _MODEL_ID.match(value):
        shown = repr(value)[:60]
        return [f"Invalid {label} {shown}: 1-{MODEL_ID_MAX} printable ASCII characters, no spaces"]
    return []


def checked_model_id(value, label: str = "model id") -> str:
    errors = model_id_errors(value, label)
    if errors:
        raise ValidationError(errors)
    return value


def checked_price(value, label: str) -> float:
    """A price in USD per 1M tokens (a number or its text): finite, 0 or more, at most
    MAX_PRICE; else ValidationError naming `label`."""
    try:
        price = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(f"{label}: {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(price) or price < 0 or price > MAX_PRICE:
        raise ValidationError(
            f"{label}: {str(value)[:40]!r} is not a price (0 to {MAX_PRICE:g} USD per 1M tokens)"
        )
    return price


def has_price(model: Model) -> bool:
    return priced(model.cost, model.supported_features)


def chat_cost(input_price, output_price, cached_input_price=None) -> dict:
    cost = {
        "type": "per_token",
        "prompt": checked_price(input_price, "input price"),
        "completion": checked_price(output_price, "output price"),
    }
    if cached_input_price is not None:
        cost["cached_prompt"] = checked_price(cached_input_price, "cached input price")
    return cost


def provider_of(slug) -> Provider:
    """The provider with this slug; Provider.DoesNotExist also for a text no slug can be (NUL,
    which PostgreSQL's text cannot even be compared with)."""
    if not isinstance(slug, str) or not _SLUG.match(slug):
        raise Provider.DoesNotExist(f"no provider {str(slug)[:64]!r}")
    return Provider.objects.get(slug=slug)


def _known_kind(kind: str) -> None:
    if kind not in PROVIDER_KINDS:
        known = ", ".join(PROVIDER_KINDS)
        raise ValidationError(f"Unknown provider kind {str(kind)[:40]!r} (known: {known})")


@transaction.atomic
def provider_add(*, slug: str, kind: str, description: str | None = None) -> tuple[Provider, bool]:
    """Add a provider (a slug and its wire protocol); the same again is a no-op (a new
    description replaces the old), the slug with another kind is refused."""
    _known_kind(kind)
    if not isinstance(slug, str) or not _SLUG.match(slug):
        raise ValidationError(f"Invalid slug {str(slug)[:64]!r}: 1-64 letters, digits, '-' or '_'")
    provider = Provider.objects.filter(slug=slug).first()
    if provider is not None:
        if provider.kind != kind:
            raise ValidationError(
                f"Provider {slug!r} exists with kind {provider.kind!r}, not {kind!r} (a "
                "provider's kind cannot change: add another slug)"
            )
        if description is not None and description != provider.description:
            provider.description = description
            provider.full_clean()
            provider.save()
        return provider, False
    provider = Provider(slug=slug, kind=kind, description=description or "")
    provider.full_clean()
    provider.save()
    return provider, True


def _chat_modalities(modalities) -> dict:
    chosen = set(modalities or ("text",))
    unknown = chosen - set(CHAT_MODALITIES)
    if unknown:
        raise ValidationError(
            f"Unknown input modality {sorted(unknown)[0][:20]!r} "
            f"(known: {', '.join(CHAT_MODALITIES)})"
        )
    if "text" not in chosen:
        raise ValidationError("A chat model takes text input ('text' among the modalities)")
    return {name: name in chosen for name in CHAT_MODALITIES}


def _efforts(efforts) -> list[str]:
    chosen = list(dict.fromkeys(efforts or ()))
    unknown = [e for e in chosen if e not in EFFORTS]
    if unknown:
        raise ValidationError(
            f"Unknown reasoning effort {unknown[0][:20]!r} (known: {', '.join(EFFORTS)})"
        )
    return chosen


def _chat_provider(slug: str) -> Provider:
    provider = provider_of(slug)
    if not kind_serves(provider.kind, "chat_completions"):
        raise ValidationError(
            f"Provider {slug!r} ({provider.kind}) does not serve chat completions"
        )
    return provider


@transaction.atomic
def chat_model_add(
    *,
    model_id: str,
    provider_slug: str,
    input_price,
    output_price,
    cached_input_price=None,
    upstream_id: str | None = None,
    input_modalities=("text",),
    reasoning_efforts=(),
    active: bool = True,
) -> tuple[Model, bool]:
    """Add or update a chat model (chat completions and responses, + reasoning with efforts)
    and its row on the provider. A model another provider owns stays as its owner made it
    (its prices are every provider's): only the same prices are accepted, and the row is
    added."""
    checked_model_id(model_id)
    upstream = checked_model_id(upstream_id or model_id, "upstream id")
    provider = _chat_provider(provider_slug)
    efforts = _efforts(reasoning_efforts)
    features = ["chat_completions", "responses"] + (["reasoning"] if efforts else [])
    fields = {
        "supported_features": features,
        "input_modality": _chat_modalities(input_modalities),
        "output_modality": {"text": True, "image": False},
        "cost": (cost := chat_cost(input_price, output_price, cached_input_price)),
    }
    model = Model.objects.filter(model_id=model_id).first()
    created = model is None
    if model is None:
        model = Model(model_id=model_id, owned_by=provider, options={})
    if model.owned_by_id == provider.pk:
        for name, value in fields.items():
            setattr(model, name, value)
        model.options = {**(model.options or {}), "reasoning_efforts": efforts}
        model.full_clean()
        model.save()
    elif any(model.cost.get(key) != price for key, price in cost.items()):
        # The prices the command names; the owner's others (a hosted search's fee) stay.
        raise ValidationError(
            f"Model {model_id!r} belongs to provider {model.owned_by.slug!r}, and its prices "
            f"are those of every provider serving it: change them with --provider "
            f"{model.owned_by.slug}, or give its current prices to add a row here"
        )
    # Another provider's model (same prices): only the row is added; its features and
    # modalities stay its owner's.
    ProviderModel.objects.update_or_create(
        model=model, provider=provider, defaults={"upstream_model_id": upstream, "active": active}
    )
    return model, created


@dataclass
class ModelsEnabled:
    enabled: list[str] = field(default_factory=list)  # rows switched on now
    unpriced: list[str] = field(default_factory=list)  # rows left off: the model has no price


def _enable_rows(provider: Provider) -> ModelsEnabled:
    result = ModelsEnabled()
    for row in ProviderModel.objects.filter(provider=provider).select_related("model"):
        if not has_price(row.model):
            result.unpriced.append(row.model.model_id)
        elif not row.active:
            row.active = True
            row.save(update_fields=["active"])
            result.enabled.append(row.model.model_id)
    return result


@transaction.atomic
def connection_configure_enabling(**kwargs) -> tuple[Connection, ModelsEnabled]:
    """`connection_configure`, then the provider's priced rows switched on (its defaults ship
    inactive until a connection with credentials exists); refused, with nothing saved, when
    the connection has no credentials."""
    connection = connection_configure(**kwargs)
    if not connection.has_credentials:
        raise ValidationError(
            f"Connection {connection} has no credentials: its provider's models are not "
            "enabled (give the key, then --enable-models)"
        )
    return connection, _enable_rows(connection.provider)


# --- sync_models: what an OpenAI-compatible server serves -------------------------------------

MODELS_MAX_BYTES = 1024 * 1024
MODELS_TIMEOUT = 10.0


def served_model_ids(provider_slug: str, name: str = "default") -> list[str]:
    """The ids `GET {base_url}/models` of the connection lists, through the gateway's guarded
    outbound HTTP (core.outbound: bounded size and time, no redirects; a private address only
    inside GATEWAY_OUTBOUND_ALLOW). Raises Refused with a readable message."""
    from core.crypto import reveal
    from core.outbound import Refused, fetch_outbound_json

    if not _SLUG.match(name or ""):
        raise Connection.DoesNotExist(f"no connection {str(name)[:64]!r}")
    connection = Connection.objects.select_related("provider").get(
        provider=provider_of(provider_slug), name=name
    )
    if connection.provider.kind != "openai_compatible":
        raise Refused(
            "wrong_kind",
            f"sync_models reads OpenAI-compatible servers; {provider_slug!r} is "
            f"{connection.provider.kind}",
        )
    key = reveal(connection.api_key)
    answer = fetch_outbound_json(
        connection.base_url.rstrip("/") + "/models",
        max_bytes=MODELS_MAX_BYTES,
        timeout=MODELS_TIMEOUT,
        headers={"Authorization": f"Bearer {key}"} if key else None,
    )
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise Refused("not_a_model_list", "The answer is not a model list ({'data': [...]})")
    if len(data) > MAX_SYNCED_MODELS:
        raise Refused("too_many", f"The server lists more than {MAX_SYNCED_MODELS} models")
    ids = [m.get("id") for m in data]
    bad = [i for i in ids if model_id_errors(i)]
    if bad:
        raise Refused("bad_model_id", model_id_errors(bad[0], "model id in the list")[0])
    return list(dict.fromkeys(ids))


@dataclass
class ModelsSynced:
    added: list[str] = field(default_factory=list)  # new catalog models
    rows: list[str] = field(default_factory=list)  # a row added to a model the catalog had
    active: list[str] = field(default_factory=list)  # rows now serving (priced)
    unpriced: list[str] = field(default_factory=list)  # listed, never activated


@transaction.atomic
def models_sync(
    *, provider_slug: str, model_ids: list[str], input_price=None, output_price=None
) -> ModelsSynced:
    """Add what a server serves as chat models of `provider_slug`. With both prices (0 allowed:
    a campus's own server) the models this provider owns get them and their rows serve; without
    them new models are added unpriced and their rows stay inactive."""
    provider = _chat_provider(provider_slug)
    if (input_price is None) != (output_price is None):
        raise ValidationError("Give both prices (input and output) or neither")
    cost = chat_cost(input_price, output_price) if input_price is not None else None
    result = ModelsSynced()
    for model_id in model_ids:
        checked_model_id(model_id)
        model = Model.objects.filter(model_id=model_id).first()
        if model is None:
            model = Model.objects.create(
                model_id=model_id,
                owned_by=provider,
                supported_features=["chat_completions", "responses"],
                input_modality=_chat_modalities(("text",)),
                output_modality={"text": True, "image": False},
                cost=cost or {},
                options={"reasoning_efforts": []},
            )
            result.added.append(model_id)
        else:
            if cost is not None and model.owned_by_id == provider.pk:
                model.cost = cost
                model.save(update_fields=["cost", "updated_at"])
            result.rows.append(model_id)
        priced = has_price(model)
        row, _ = ProviderModel.objects.get_or_create(
            model=model, provider=provider, defaults={"upstream_model_id": model_id}
        )
        if row.active != priced:
            row.active = priced
            row.save(update_fields=["active"])
        (result.active if priced else result.unpriced).append(model_id)
    return result

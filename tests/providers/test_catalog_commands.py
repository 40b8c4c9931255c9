"""The operator commands of issue 34: add_provider, add_model, sync_models and the new options
of configure_connection (each write through catalog/services.py)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from catalog.models import Connection, Model, Provider, ProviderModel

pytestmark = pytest.mark.django_db

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def refused(message: str):
    return pytest.raises(CommandError, match=re.escape(message))


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def loaded():
    run("load_catalog")


# --- add_provider --------------------------------------------------------------------------


def test_add_provider_is_idempotent_for_the_same_kind():
    assert "added" in run("add_provider", "campus", "--kind", "openai_compatible")
    out = run("add_provider", "campus", "--kind", "openai_compatible", "--description", "GPUs")
    assert "already there" in out
    provider = Provider.objects.get(slug="campus")
    assert (provider.kind, provider.description) == ("openai_compatible", "GPUs")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("x", "--kind", "vllm"), "Unknown provider kind 'vllm' (known: openai, openrouter"),
        (("direct", "--kind", "azure_openai"), "exists with kind 'openai', not 'azure_openai'"),
        (("not a slug", "--kind", "openai"), "slug"),
        (("a\x00b", "--kind", "openai"), "slug"),
    ],
)
def test_add_provider_refusals(loaded, args, message):
    with refused(message):
        run("add_provider", *args)
    assert not Provider.objects.filter(slug__in=["x", "not a slug"]).exists()


# --- configure_connection: the kinds' options, --enable-models -------------------------------


def test_azure_options_and_deployment_map(loaded):
    out = run(
        "configure_connection",
        "azure",
        "--base-url",
        "https://school.openai.azure.com/openai/v1/",
        "--api-key",
        "k",
        "--api-version",
        "2024-10-21",
        "--deployment-map",
        "gpt-4o-mini=mini-eu",
        "--deployment-map",
        "gpt-4.1=big",
        "--tag",
        "eu",
    )
    assert "options api_version=2024-10-21" in out
    connection = Connection.objects.get(provider__slug="azure")
    assert connection.base_url == "https://school.openai.azure.com"  # the API path is the adapter's
    assert connection.options == {
        "api_version": "2024-10-21",
        "deployments": {"gpt-4o-mini": "mini-eu", "gpt-4.1": "big"},
    }
    # '' removes: back to the v1 path, and the map cleared; the key stays.
    run("configure_connection", "azure", "--base-url", "https://school.openai.azure.com",
        "--api-version", "", "--deployment-map", "")  # fmt: skip
    connection.refresh_from_db()
    assert connection.options == {} and connection.has_credentials


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("azure", "--api-version", "yesterday"), "'api_version' must be an Azure API version"),
        (("azure", "--deployment-map", "gpt-4o-mini"), "MODEL=DEPLOYMENT"),
        (("azure", "--deployment-map", "m=bad name"), "must be 1-64 letters"),
        (("direct", "--api-version", "2024-10-21"), "Unknown option 'api_version' for a openai"),
        (("azure", "--responses-api", "native"), "Unknown option 'responses_api'"),
    ],
)
def test_option_refusals(loaded, args, message):
    with refused(message):
        run("configure_connection", *args, "--base-url", "https://x.example", "--api-key", "k")
    assert not Connection.objects.filter(base_url="https://x.example").exists()


def test_compatible_connection_needs_no_key_and_takes_its_options(loaded):
    run("add_provider", "campus", "--kind", "openai_compatible")
    out = run(
        "configure_connection",
        "campus",
        "--base-url",
        "http://10.0.0.5:8000/v1",
        "--responses-api",
        "native",
        "--stream-usage",
        "always",
    )
    assert "(with credentials" in out  # a keyless server is usable
    connection = Connection.objects.get(provider__slug="campus")
    assert connection.options == {"responses_api": "native", "stream_usage": "always"}
    assert connection.api_key == ""


def test_enable_models_switches_on_priced_rows_only(loaded):
    assert not ProviderModel.objects.filter(provider__slug="mistral", active=True).exists()
    Model.objects.create(
        model_id="unpriced",
        owned_by=Provider.objects.get(slug="mistral"),
        supported_features=["chat_completions", "responses"],
        cost={},
    ).provider_rows.create(provider=Provider.objects.get(slug="mistral"), active=False)
    out = run(
        "configure_connection",
        "mistral",
        "--base-url",
        "https://api.mistral.ai/v1",
        "--api-key",
        "k",
        "--stream-usage",
        "always",
        "--enable-models",
    )
    assert "Models enabled: mistral-large-latest, mistral-small-latest" in out
    assert "Left inactive, without a price: unpriced" in out
    active = ProviderModel.objects.filter(provider__slug="mistral", active=True)
    assert sorted(active.values_list("model__model_id", flat=True)) == [
        "mistral-large-latest",
        "mistral-small-latest",
    ]


def test_enable_models_refused_without_credentials(loaded):
    with refused("has no credentials"):
        run("configure_connection", "azure", "--base-url", "https://a.example", "--enable-models")
    assert not Connection.objects.filter(provider__slug="azure").exists()  # nothing saved
    assert not ProviderModel.objects.filter(provider__slug="azure", active=True).exists()


# --- add_model -----------------------------------------------------------------------------


def test_add_model_creates_then_updates(loaded):
    run("add_provider", "campus", "--kind", "openai_compatible")
    out = run(
        "add_model", "llama-8b", "--provider", "campus", "--upstream-id", LLAMA,
        "--input-price", "0.2", "--output-price", "0.6", "--cached-input-price", "0.1",
        "--input-modality", "text,image", "--reasoning-efforts", "low,high",
    )  # fmt: skip
    assert "Model llama-8b added on campus (active): 0.2 in / 0.6 out" in out
    model = Model.objects.get(model_id="llama-8b")
    assert model.cost == {
        "type": "per_token",
        "prompt": 0.2,
        "completion": 0.6,
        "cached_prompt": 0.1,
    }
    assert model.supported_features == ["chat_completions", "responses", "reasoning"]
    assert model.input_modality["image"] is True and model.input_modality["audio"] is False
    assert model.options == {"reasoning_efforts": ["low", "high"]}
    row = model.provider_rows.get()
    assert (row.provider.slug, row.upstream_model_id, row.active) == ("campus", LLAMA, True)
    out = run("add_model", "llama-8b", "--provider", "campus", "--input-price", "0",
              "--output-price", "0", "--inactive")  # fmt: skip
    assert "updated" in out
    model.refresh_from_db()
    row.refresh_from_db()
    assert model.cost == {"type": "per_token", "prompt": 0.0, "completion": 0.0}
    assert "reasoning" not in model.supported_features
    assert (row.upstream_model_id, row.active) == ("llama-8b", False)


def test_add_model_row_for_a_model_another_provider_owns(loaded):
    args = ("add_model", "gpt-4o-mini", "--provider", "azure", "--upstream-id", "mini-eu")
    with refused("belongs to provider 'direct'"):
        run(*args, "--input-price", "1", "--output-price", "1")
    # Its current prices: the row is added (the prices stay every provider's).
    run(*args, "--input-price", "0.15", "--output-price", "0.6", "--cached-input-price", "0.075")
    row = ProviderModel.objects.get(model__model_id="gpt-4o-mini", provider__slug="azure")
    assert (row.upstream_model_id, row.active) == ("mini-eu", True)
    assert row.model.input_modality["image"] is True  # the owner's, not the default text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--input-price", "nan"), "input price: 'nan' is not a price"),
        (("--input-price", "-1"), "input price: '-1' is not a price"),
        (("--output-price", "1e400"), "output price: '1e400' is not a price"),
        (("--output-price", str(2**64)), "output price: '18446744073709551616' is not a price"),
        (("--output-price", "cheap"), "output price: 'cheap' is not a number"),
        (("--cached-input-price", "inf"), "cached input price: 'inf' is not a price"),
        (("--upstream-id", "a\x00b"), "Invalid upstream id"),
        (("--upstream-id", "has space"), "Invalid upstream id"),
        (("--input-modality", "text,smell"), "Unknown input modality 'smell'"),
        (("--input-modality", "image"), "takes text input"),
        (("--reasoning-efforts", "max"), "Unknown reasoning effort 'max'"),
    ],
)
def test_add_model_hostile_values(loaded, args, message):
    base = {"--input-price": "1", "--output-price": "2"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [part for pair in base.items() for part in pair]
    with refused(message):
        run("add_model", "new-model", "--provider", "mistral", *flat)
    assert not Model.objects.filter(model_id="new-model").exists()


@pytest.mark.parametrize(
    ("model_id", "provider", "message"),
    [
        ("nul\x00id", "mistral", "Invalid model id"),
        ("x" * 201, "mistral", "Invalid model id"),
        ("ok", "nobody", "Unknown provider 'nobody'"),
        ("ok", "websearch", "does not serve chat completions"),
        ("ok", "nul\x00slug", "Unknown provider 'nul"),
    ],
)
def test_add_model_bad_ids_and_providers(loaded, model_id, provider, message):
    with refused(message):
        run("add_model", model_id, "--provider", provider, "--input-price", "1",
            "--output-price", "1")  # fmt: skip


# --- sync_models ---------------------------------------------------------------------------


@pytest.fixture
def campus(loaded, compatible_upstream, settings):
    """A provider `campus` connected to the keyless fake, reachable through the outbound
    guard (loopback and its port allowed, as an operator allows a campus network)."""
    port = int(compatible_upstream.origin.rsplit(":", 1)[-1])
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
    }
    run("add_provider", "campus", "--kind", "openai_compatible")
    run("configure_connection", "campus", "--base-url", compatible_upstream.base_url)
    return compatible_upstream


def test_sync_models_with_prices_serves_them(campus):
    out = run("sync_models", "campus", "--price-input", "0", "--price-output", "0")
    assert f"2 model(s) added, 0 already in the catalog; serving: {LLAMA}, mistral-small" in out
    model = Model.objects.get(model_id=LLAMA)
    assert model.cost == {"type": "per_token", "prompt": 0.0, "completion": 0.0}
    assert model.owned_by.slug == "campus"
    assert model.provider_rows.get().active is True
    assert campus.last.path == "/v1/models" and "authorization" not in campus.last.headers


def test_sync_models_without_prices_lists_them_inactive(campus):
    out = run("sync_models", "campus")
    assert "serving: none" in out
    assert "Price them with sync_models campus --price-input" in out
    assert not ProviderModel.objects.filter(provider__slug="campus", active=True).exists()
    assert Model.objects.get(model_id="mistral-small").cost == {}
    # --enable-models does not switch on an unpriced row either.
    out = run("configure_connection", "campus", "--base-url", campus.base_url, "--enable-models")
    assert "Left inactive, without a price: " in out
    assert not ProviderModel.objects.filter(provider__slug="campus", active=True).exists()
    # Priced later: the same rows serve.
    run("sync_models", "campus", "--price-input", "0.1", "--price-output", "0.2")
    assert ProviderModel.objects.filter(provider__slug="campus", active=True).count() == 2


def test_sync_models_sends_the_key_when_there_is_one(campus):
    run("configure_connection", "campus", "--base-url", campus.base_url, "--api-key", "sk-c")
    run("sync_models", "campus")
    assert campus.last.headers["authorization"] == "Bearer sk-c"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda fake: setattr(fake, "models_garbage", True), "The answer is not JSON"),
        (lambda fake: fake.fail_next(503), "The URL answered 503"),
        (lambda fake: fake.bloat_next(2 * 1024 * 1024), "larger than"),
        (lambda fake: fake.fail_next(200, {"data": "x"}), "not a model list"),
        (lambda fake: fake.fail_next(200, {"data": [{"id": "a b"}]}), "Invalid model id"),
    ],
    ids=["garbage", "status", "oversized", "shape", "bad-id"],
)
def test_sync_models_unreadable_servers(campus, setup, message):
    setup(campus)
    with refused(message):
        run("sync_models", "campus")
    assert not Model.objects.filter(owned_by__slug="campus").exists()


def test_sync_models_refusals(campus, settings):
    with refused("is not a price"):
        run("sync_models", "campus", "--price-input", "nan", "--price-output", "0")
    with refused("both prices"):
        run("sync_models", "campus", "--price-input", "1")
    with refused("reads OpenAI-compatible servers; 'azure' is"):
        run("configure_connection", "azure", "--base-url", "https://a.example", "--api-key", "k")
        run("sync_models", "azure")
    with refused("No connection mistral/default"):
        run("sync_models", "mistral")
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOW": ""}
    with refused("add its network to GATEWAY_OUTBOUND_ALLOW"):
        run("sync_models", "campus")


def test_sync_models_server_that_hangs(campus, monkeypatch):
    import catalog.services

    monkeypatch.setattr(catalog.services, "MODELS_TIMEOUT", 0.05)
    campus.hold_next()
    try:
        with refused("Could not read the models of campus: No complete answer within 0.05 s"):
            run("sync_models", "campus")
    finally:
        campus.release()
    assert not Model.objects.filter(owned_by__slug="campus").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("configure_connection", "nul\x00slug", "--base-url", "https://a.example"),
        ("configure_connection", "azure", "--name", "n\x00", "--base-url", "https://a.example"),
        ("sync_models", "nul\x00slug"),
        ("sync_models", "mistral", "--name", "n\x00"),
    ],
)
def test_nul_in_slugs_and_names_is_a_clear_error(loaded, args):
    """Not a traceback: PostgreSQL's text cannot hold (or be compared with) NUL."""
    with pytest.raises(CommandError):
        run(*args)

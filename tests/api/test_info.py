"""GET /v1/health, /v1/models and /v1/license."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from licensing.models import Wallet

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def test_health_needs_no_credentials(client):
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "spool": "ok"}


def test_health_ignores_bad_credentials(client):
    response = client.get("/v1/health", headers={"Authorization": "Basic nope"})
    assert response.status_code == 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_health_is_degraded_when_redis_is_configured_and_down(client, settings):
    """Issue 35: the worker serves without Redis (fair use admits, circuits act closed), but not
    as configured: 200 `degraded`, and which part is missing."""
    settings.REDIS_URL = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "database": "ok",
        "spool": "ok",
        "redis": "unreachable",
    }


@pytest.mark.slow  # a redis-server of its own
def test_health_shows_redis_ok_when_it_answers(client, settings, tmp_path):
    from tests.processes import redis_server_or_skip

    server = redis_server_or_skip(tmp_path)
    try:
        settings.REDIS_URL = server.url
        response = client.get("/v1/health")
    finally:
        server.stop()
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "spool": "ok", "redis": "ok"}


@pytest.mark.slow
def test_health_503_when_database_is_unreachable(tmp_path):
    """A real gateway process whose database does not answer (nothing listens on the port)."""
    dead_port, port = _free_port(), _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://nobody@127.0.0.1:{dead_port}/none",
        "GATEWAY_ACCESS_LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "gateway_site.asgi:application", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert response.status_code == 503
        assert response.json()["status"] == "error"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_models_list_envelope_and_client_fields(client, auth, catalog):
    response = client.get("/v1/models", headers=auth)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    entries = {entry["id"]: entry for entry in body["data"]}
    small = entries["text-embedding-3-small"]
    assert small["supported_features"] == ["embeddings"]
    assert small["output_modality"]["text"] is False
    assert small["cost"] == {"type": "per_token", "prompt": 0.02}
    assert small["object"] == "model"
    assert set(small) == {
        "id",
        "object",
        "created",
        "owned_by",
        "supported_features",
        "input_modality",
        "output_modality",
        "cost",
    }
    image = entries["gpt-image-1"]
    assert "image_generation" in image["supported_features"]
    assert image["output_modality"]["image"] is True
    assert image["cost"]["type"] == "per_token"
    # Retired models (all rows inactive) are not offered.
    assert "dall-e-3" not in entries and "dall-e-2" not in entries
    assert "options" not in small  # internal fields stay internal


def test_models_after_enabling_a_row(client, auth, all_upstreams):
    """`all_upstreams`: the row's provider (`multimodal`) has a connection with a key."""
    from catalog.models import ProviderModel

    row = ProviderModel.objects.get(model__model_id="imagen-4.0-generate-001")
    row.active = True
    row.save()
    ids = {entry["id"] for entry in client.get("/v1/models", headers=auth).json()["data"]}
    assert "imagen-4.0-generate-001" in ids
    entry = next(
        e
        for e in client.get("/v1/models", headers=auth).json()["data"]
        if e["id"] == "imagen-4.0-generate-001"
    )
    assert entry["cost"] == {"type": "per_image", "image": 40000}


def test_license_unlimited(client, auth):
    response = client.get("/v1/license", headers=auth)
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "test-license"
    assert body["license_type"] == {"name": "Open access"}
    assert "embeddings" in body["services"] and "image_generation" in body["services"]
    assert body["budget"] == {
        "unit": "micro_credits",
        "strategy": "pooled",
        "period": "lifetime",
        "window_start": None,
        "limit": None,
        "used": 0,
        "remaining": None,
    }


def test_license_with_budget_and_spend(client, make_license, make_key):
    from licensing.ledger.budget import window_start

    license = make_license(name="limited", limit=1_000_000, period="monthly")
    key = make_key(license)
    from django.utils import timezone

    Wallet.objects.create(
        license=license,
        holder="license",
        period="monthly",
        window_start=window_start("monthly", timezone.now()),
        unit="micro_credits",
        spent=250_000,
    )
    body = client.get("/v1/license", headers={"Authorization": f"Bearer {key}"}).json()
    assert body["budget"]["limit"] == 1_000_000
    assert body["budget"]["used"] == 250_000
    assert body["budget"]["remaining"] == 750_000
    assert body["budget"]["period"] == "monthly"
    assert body["budget"]["window_start"].startswith(timezone.now().strftime("%Y-%m-01"))


def test_license_services_follow_policy(client, make_license, make_key):
    license = make_license(name="embed-only", policy={"version": 1, "services": {"embeddings": {}}})
    key = make_key(license)
    body = client.get("/v1/license", headers={"Authorization": f"Bearer {key}"}).json()
    assert body["services"] == ["embeddings"]


def test_license_budget_misconfiguration_is_500(client, license, auth):
    license.budget_period = "fortnightly"
    license.save()
    response = client.get("/v1/license", headers=auth)
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "Budget configuration error"}}


def test_info_endpoints_run_check_4(client, auth):
    for path in ("/v1/models", "/v1/license"):
        response = client.get(path, headers={**auth, "X-Service-Provider": "a/b/c"})
        assert response.status_code == 400
    # check 1 and 3 come before 4
    response = client.get("/v1/models", headers={"X-Service-Provider": "a/b/c"})
    assert response.status_code == 401


# --- which models are listed: what the caller can use (README, Decisions) ---------------------

LLAMA = "meta-llama/llama-3.1-8b-instruct"  # the default catalog's aggregator-only model
CHAT = {"gpt-4o-mini", "gpt-4.1", "o4-mini", "gpt-4o-audio-preview"}  # direct's chat models
EMBEDDINGS = {"text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002"}


def model_ids(client, headers) -> list[str]:
    response = client.get("/v1/models", headers=headers)
    assert response.status_code == 200, response.text
    return [entry["id"] for entry in response.json()["data"]]


@pytest.fixture
def gateway_log():
    """The `gateway` logger's records (it does not propagate to caplog's root handler)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = records.append
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def clear_key(provider: str) -> None:
    from catalog.models import Connection

    connection = Connection.objects.get(provider__slug=provider, name="default")
    connection.api_key = ""
    connection.save()  # the catalog's signals clear the caches, as an admin edit does


def test_default_catalog_lists_what_is_served(client, auth, catalog):
    ids = model_ids(client, auth)
    assert ids == sorted(ids)  # catalog order
    # `catalog`: direct and aggregator connected; cloud and multimodal have no connection.
    assert set(ids) == CHAT | EMBEDDINGS | {"gpt-image-1", LLAMA}


def test_a_connection_without_a_key_removes_its_models(client, auth, catalog):
    assert LLAMA in model_ids(client, auth)
    clear_key("aggregator")  # a fresh install: no OPENROUTER_API_KEY
    ids = set(model_ids(client, auth))
    assert LLAMA not in ids
    assert ids == CHAT | EMBEDDINGS | {"gpt-image-1"}
    clear_key("direct")
    # The embeddings models have aggregator rows too, but a request goes to the owner first
    # (`direct`), and is refused: the list says what a request would get.
    assert model_ids(client, auth) == []


def test_a_model_whose_connection_lacks_credentials_is_the_spec_400_and_a_log_line(
    client, auth, catalog, gateway_log
):
    import logging

    clear_key("aggregator")
    response = client.post(
        "/v1/chat/completions",
        json={"model": LLAMA, "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
    )
    assert response.status_code == 400
    # The client gets the spec's message, word for word.
    assert response.json() == {
        "error": {"message": "Connection 'default' is misconfigured: missing 'api_key' credential"}
    }
    [record] = [r for r in gateway_log if "misconfigured" in r.getMessage()]
    assert (record.levelno, record.name) == (logging.WARNING, "gateway")
    assert record.getMessage() == (
        "connection aggregator/default is misconfigured: missing 'api_key' credential; request "
        f"{response.headers['X-Request-Id']} for model '{LLAMA}' refused (license test-license)"
    )
    assert catalog["aggregator"].requests == []


def test_the_routing_credentials_check_decides_not_the_connection_row(
    client, auth, all_upstreams, activate_rows
):
    """A Bedrock connection with an API key but no IAM pair: a request is refused (IAM
    credentials), the list follows the request, and the connection row (admin,
    `configure_connection`) says the same (one credentials test, catalog.registry)."""
    from catalog.models import Connection

    titan = "amazon.titan-embed-text-v2:0"
    assert titan in model_ids(client, auth)
    cloud = Connection.objects.get(provider__slug="cloud")
    cloud.api_key, cloud.aws_access_key_id, cloud.aws_secret_access_key = "a-key", "", ""
    cloud.save()
    assert not cloud.has_credentials
    assert titan not in model_ids(client, auth)
    response = client.post(
        "/v1/bedrock/embeddings", json={"model": titan, "inputText": "x"}, headers=auth
    )
    assert response.json() == {
        "error": {"message": "Connection 'default' is misconfigured: missing IAM credentials"}
    }


@pytest.mark.parametrize(
    "policy,expected",
    [
        ({"embeddings": {}}, EMBEDDINGS),
        (
            {"embeddings": {"params": {"model": {"allowed": ["text-embedding-3-small"]}}}},
            {"text-embedding-3-small"},
        ),
        (
            {
                "chat_completions": {"params": {"model": {"patterns": ["gpt-4o.*"]}}},
                "image_generation": {"params": {"model": {"excluded": ["gpt-image-1"]}}},
            },
            {"gpt-4o-mini", "gpt-4o-audio-preview"},
        ),
        # `responses` alone still lists the chat models (they support both).
        ({"responses": {"params": {"model": {"fixed": "o4-mini"}}}}, {"o4-mini"}),
        # Only the aggregator for embeddings: its rows serve the three models.
        ({"embeddings": {"providers": ["aggregator"]}}, EMBEDDINGS),
        ({"embeddings": {"providers": ["cloud"]}}, set()),
        ({"chat_completions": {"params": {"model": {"forbidden": True}}}}, set()),
        ({"web_search": {}, "fetch": {}}, set()),  # services, not models
        ({}, set()),
    ],
    ids=[
        "service",
        "allowed",
        "patterns-excluded",
        "fixed",
        "providers",
        "no-provider",
        "forbidden",
        "search",
        "nothing",
    ],
)
def test_the_license_policy_decides_what_is_listed(
    client, catalog, make_license, make_key, policy, expected
):
    license = make_license(name="narrow", policy={"version": 1, "services": policy})
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    assert set(model_ids(client, headers)) == expected
    for model in expected:
        assert client.get(f"/v1/models/{model}", headers=headers).status_code == 200


def test_a_provider_pin_narrows_the_list(client, auth, catalog):
    pinned = set(model_ids(client, {**auth, "X-Service-Provider": "aggregator"}))
    assert pinned == EMBEDDINGS | {"gpt-4o-mini", "gpt-4.1", "o4-mini", LLAMA}  # its rows
    assert set(model_ids(client, {**auth, "X-Service-Provider": "direct/default"})) == (
        CHAT | EMBEDDINGS | {"gpt-image-1"}
    )
    # A connection that does not exist, or a provider that does not exist: nothing to use.
    assert model_ids(client, {**auth, "X-Service-Provider": "direct/other"}) == []
    assert model_ids(client, {**auth, "X-Service-Provider": "nobody"}) == []
    headers = {**auth, "X-Service-Provider": "aggregator"}
    assert client.get("/v1/models/gpt-image-1", headers=headers).status_code == 404
    assert client.get(f"/v1/models/{LLAMA}", headers=headers).status_code == 200


def test_a_policy_that_cannot_be_evaluated_lists_nothing(client, catalog, make_license, make_key):
    license = make_license(name="broken", policy={"version": 1, "services": {"embeddings": {}}})
    license.license_type.policy = {"version": 9, "services": {}}
    license.license_type.save()  # bypasses the admin's validation, as a bad migration would
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    assert model_ids(client, headers) == []


# --- GET /v1/models/{id} ------------------------------------------------------------------------


def test_retrieve_is_the_list_entry(client, auth, catalog, sdk):
    listed = {e["id"]: e for e in client.get("/v1/models", headers=auth).json()["data"]}
    for model_id in ("text-embedding-3-small", "gpt-image-1", LLAMA):
        response = client.get(f"/v1/models/{model_id}", headers=auth)
        assert response.status_code == 200
        assert response.json() == listed[model_id]
    # The openai SDK sends the slash of an aggregator id as %2F.
    model = sdk.models.retrieve(LLAMA)
    assert model.id == LLAMA and model.object == "model" and model.owned_by == "aggregator"
    assert model.model_extra["supported_features"] == listed[LLAMA]["supported_features"]
    assert model.model_extra["cost"] == listed[LLAMA]["cost"]
    assert sdk.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"


def test_retrieve_unknown_or_unusable_is_404(client, auth, catalog, sdk, make_license, make_key):
    import openai

    message = "The model '{}' does not exist or you do not have access to it"
    for model_id in ("no-such-model", "dall-e-3", "web-search"):  # unknown, retired, unlisted
        response = client.get(f"/v1/models/{model_id}", headers=auth)
        assert response.status_code == 404
        assert response.json() == {"error": {"message": message.format(model_id)}}
    with pytest.raises(openai.NotFoundError) as excinfo:
        sdk.models.retrieve("openai/no-such-model")
    assert str(excinfo.value) == "Error code: 404 - " + message.format("openai/no-such-model")
    # A model the license's policy does not allow: the same 404.
    license = make_license(name="embed-only", policy={"version": 1, "services": {"embeddings": {}}})
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    response = client.get("/v1/models/gpt-4o-mini", headers=headers)
    assert response.json() == {"error": {"message": message.format("gpt-4o-mini")}}
    clear_key("aggregator")
    assert client.get(f"/v1/models/{LLAMA}", headers=auth).status_code == 404


def test_retrieve_runs_checks_1_3_4(client, auth, catalog):
    path = "/v1/models/gpt-4o-mini"
    assert client.get(path).json() == {"error": {"message": "Authentication required"}}
    assert client.get(path, headers={"Authorization": "Bearer sk-svc-nope"}).status_code == 401
    response = client.get(path, headers={"Authorization": "Basic x"})
    assert response.status_code == 401
    response = client.get(path, headers={**auth, "X-Service-Provider": "a/b/c"})
    assert response.json() == {"error": {"message": "Malformed X-Service-Provider header: 'a/b/c'"}}
    response = client.get(path, headers={"X-Service-Provider": "a/b/c"})
    assert response.status_code == 401


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_retrieve_is_get_only(client, auth, catalog, method):
    response = client.request(method, f"/v1/models/{LLAMA}", headers=auth)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET"
    assert response.json() == {
        "detail": [
            {
                "type": "method_not_allowed",
                "loc": ["request", "method"],
                "msg": "Method Not Allowed",
                "input": method,
                "ctx": {"allowed": ["GET"]},
            }
        ],
        "error": {
            "message": f"Method Not Allowed: {method} (allowed: GET)",
            "type": "invalid_request_error",
            "param": None,
            "code": "method_not_allowed",
        },
    }


@pytest.mark.parametrize(
    "raw_path",
    [
        "%00",
        "gpt-4o-mini%00",
        "%ED%A0%80",  # a lone surrogate, UTF-8 encoded (not valid UTF-8)
        "%5Cud800",
        "%FF%FE",
        "a%2F..%2F..%2Flicense",
        "x" * 10_000,
        "%20",
        "1e400",
        str(2**64),
    ],
    ids=[
        "nul",
        "nul-suffix",
        "surrogate",
        "escaped-surrogate",
        "bad-utf8",
        "dots",
        "10kb",
        "space",
        "1e400",
        "2**64",
    ],
)
def test_retrieve_hostile_ids_are_404(client, auth, catalog, raw_path):
    url = httpx.URL(client.base_url.join("/v1/models/"), raw_path=f"/v1/models/{raw_path}".encode())
    response = client.get(url, headers=auth)
    assert response.status_code == 404, response.text
    assert set(response.json()) == {"error"}
    assert len(response.json()["error"]["message"]) < 300


def test_openapi_documents_retrieve(client):
    doc = client.get("/v1/openapi.json").json()
    operation = doc["paths"]["/v1/models/{model}"]
    assert set(operation) == {"get"}
    assert {"200", "401", "404", "405"} <= set(operation["get"]["responses"])

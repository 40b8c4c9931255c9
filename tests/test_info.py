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
ROOT = Path(__file__).resolve().parent.parent


def test_health_needs_no_credentials(client):
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_health_ignores_bad_credentials(client):
    response = client.get("/v1/health", headers={"Authorization": "Basic nope"})
    assert response.status_code == 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def test_models_after_enabling_a_row(client, auth, catalog):
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
    from licensing.budget import window_start

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

"""Operator commands of decisions.md."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from catalog.models import Connection, Model, Provider, ProviderModel
from core.crypto import reveal
from licensing.access.credentials import resolve_credential
from licensing.models import ApiKey, License

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_load_catalog_is_idempotent_and_keeps_operator_choices():
    run("load_catalog")
    counts = (Provider.objects.count(), Model.objects.count(), ProviderModel.objects.count())
    assert set(Provider.objects.values_list("slug", flat=True)) >= {
        "direct",
        "aggregator",
        "cloud",
        "multimodal",
    }
    row = ProviderModel.objects.get(model__model_id="imagen-4.0-fast-generate-001")
    assert row.active is False
    row.active = True
    row.save()
    Model.objects.filter(model_id="text-embedding-3-small").update(cost={"prompt": 99})
    run("load_catalog")
    assert (
        Provider.objects.count(),
        Model.objects.count(),
        ProviderModel.objects.count(),
    ) == counts
    row.refresh_from_db()
    assert row.active is True  # kept
    assert Model.objects.get(model_id="text-embedding-3-small").cost == {
        "type": "per_token",
        "prompt": 0.02,
    }
    run("load_catalog", "--reset-rows")
    row.refresh_from_db()
    assert row.active is False


def test_default_catalog_contents():
    run("load_catalog")

    def rows(model_id):
        return {
            (r.provider.slug, r.upstream_model_id, r.active)
            for r in ProviderModel.objects.filter(model__model_id=model_id)
        }

    assert rows("gpt-image-1") == {("direct", "gpt-image-1", True)}
    assert rows("dall-e-3") == {("direct", "dall-e-3", False)}
    assert rows("dall-e-2") == {("direct", "dall-e-2", False)}
    assert ("aggregator", "openai/text-embedding-3-small", True) in rows("text-embedding-3-small")
    for model_id in (
        "amazon.titan-image-generator-v2:0",
        "amazon.nova-canvas-v1:0",
        "stability.stable-image-core-v1:1",
        "stability.stable-image-ultra-v1:1",
        "stability.sd3-5-large-v1:0",
        "imagen-4.0-fast-generate-001",
        "imagen-4.0-generate-001",
        "imagen-4.0-ultra-generate-001",
        "gemini-2.5-flash-image",
    ):
        assert all(not active for _, _, active in rows(model_id)), model_id
    costs = {m.model_id: m.cost for m in Model.objects.all()}
    assert costs["text-embedding-3-large"] == {"type": "per_token", "prompt": 0.13}
    assert costs["text-embedding-ada-002"] == {"type": "per_token", "prompt": 0.10}
    assert costs["stability.stable-image-core-v1:1"] == {"type": "per_image", "image": 30000}
    assert costs["stability.stable-image-ultra-v1:1"] == {"type": "per_image", "image": 80000}
    assert costs["stability.sd3-5-large-v1:0"] == {"type": "per_image", "image": 65000}
    assert costs["imagen-4.0-fast-generate-001"]["image"] == 20000
    assert costs["imagen-4.0-ultra-generate-001"]["image"] == 60000
    assert costs["dall-e-2"]["type"] == "per_image_by_size"
    assert costs["dall-e-3"]["type"] == "per_image_by_size_quality"
    chat_owners = {
        r.provider.slug
        for r in ProviderModel.objects.select_related("provider", "model")
        if "chat_completions" in r.model.supported_features
    }
    assert {"direct", "aggregator"} <= chat_owners


def test_configure_connection_creates_and_updates():
    run("load_catalog")
    out = run(
        "configure_connection",
        "direct",
        "--base-url",
        "https://api.example/v1",
        "--api-key",
        "sk-1",
    )
    assert "direct/default" in out and "sk-1" not in out
    run("configure_connection", "direct", "--base-url", "https://api2.example/v1")
    connection = Connection.objects.get(provider__slug="direct", name="default")
    assert (connection.base_url, reveal(connection.api_key)) == ("https://api2.example/v1", "sk-1")
    run(
        "configure_connection",
        "cloud",
        "--name",
        "eu",
        "--base-url",
        "https://bedrock-runtime.eu-west-1.amazonaws.com",
        "--region",
        "eu-west-1",
        "--aws-access-key-id",
        "AKIA1",
        "--aws-secret-access-key",
        "s3cr3t",
    )
    eu = Connection.objects.get(provider__slug="cloud", name="eu")
    assert (eu.region, eu.aws_access_key_id) == ("eu-west-1", "AKIA1")


def test_configure_connection_errors():
    run("load_catalog")
    with pytest.raises(CommandError, match="Unknown provider"):
        run("configure_connection", "nope", "--base-url", "https://x.example")
    with pytest.raises(CommandError, match="valid URL"):
        run("configure_connection", "direct", "--base-url", "not a url")


def test_create_license_defaults_to_open_unlimited():
    out = run("create_license", "school")
    license = License.objects.get(name="school")
    assert license.budget_limit is None and license.budget_period == "lifetime"
    assert license.budget_strategy == "pooled"
    assert set(license.license_type.policy["services"]) >= {"embeddings", "image_generation"}
    assert "school" in out


def test_create_license_with_policy_and_budget(tmp_path):
    policy = {"version": 1, "services": {"embeddings": {"params": {"dimensions": {"max": 512}}}}}
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    run(
        "create_license",
        "uni",
        "--policy-file",
        str(path),
        "--limit",
        "5000000",
        "--period",
        "monthly",
        "--strategy",
        "per_user",
    )
    license = License.objects.get(name="uni")
    assert license.license_type.policy == policy
    assert (license.budget_limit, license.budget_period, license.budget_strategy) == (
        5_000_000,
        "monthly",
        "per_user",
    )


def test_create_license_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 7}')
    with pytest.raises(CommandError, match="Invalid policy"):
        run("create_license", "x", "--policy-file", str(bad))
    with pytest.raises(CommandError, match="Unknown period"):
        run("create_license", "x", "--period", "hourly")
    with pytest.raises(CommandError, match="Unknown strategy"):
        run("create_license", "x", "--strategy", "shared")
    run("create_license", "x")
    with pytest.raises(CommandError, match="already exists"):
        run("create_license", "x")
    assert License.objects.count() == 1


def test_create_api_key_prints_only_the_key():
    run("create_license", "school")
    out = run("create_api_key", "school", "--expires-in-days", "30")
    key = out.strip()
    assert out == key + "\n" and key.startswith("sk-svc-") and len(key) == 50
    row = ApiKey.objects.get()
    assert row.expires_at is not None
    assert resolve_credential(key).license.name == "school"
    with pytest.raises(CommandError, match="No license"):
        run("create_api_key", "nobody")

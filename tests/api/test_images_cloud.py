"""POST /v1/images/generations on the `cloud` provider (Bedrock InvokeModel, SigV4) end to end."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from fake_upstreams import BedrockFake, png, serve
from licensing.models import Transaction
from tests.conftest import AWS_ACCESS_KEY, AWS_SECRET_KEY
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
TITAN = "amazon.titan-image-generator-v2:0"
NOVA = "amazon.nova-canvas-v1:0"
CORE = "stability.stable-image-core-v1:1"
ULTRA = "stability.stable-image-ultra-v1:1"
LARGE = "stability.sd3-5-large-v1:0"
CLOUD_MODELS = (TITAN, NOVA, CORE, ULTRA, LARGE)
WEST = "us-west-2"
# Fields that belong to other providers' models: never sent to these.
FOREIGN = {
    "style": "vivid",
    "background": "opaque",
    "output_format": "jpeg",
    "output_compression": 50,
    "moderation": "low",
    "user": "stu-1",
}


def generate(client, auth, body, **headers):
    return client.post("/v1/images/generations", json=body, headers={**auth, **headers})


def decoded_png(b64: str) -> dict:
    return png.read_png(base64.b64decode(b64))


def configure(name="default", **kwargs):
    from catalog.services import connection_configure
    from core.localcache import clear_all

    connection_configure(provider_slug="cloud", name=name, **kwargs)
    clear_all()


@pytest.fixture(scope="session")
def west_upstream():
    """A second Bedrock endpoint, in the one region the stability-type models are served in."""
    fake = BedrockFake(access_key=AWS_ACCESS_KEY, secret_key=AWS_SECRET_KEY, region=WEST)
    with serve(fake) as served:
        yield served


@pytest.fixture
def cloud(all_upstreams, activate_rows, west_upstream):
    """The cloud image rows enabled, `cloud/default` in us-east-1 (the fixture's fake)."""
    west_upstream.reset()
    activate_rows(*CLOUD_MODELS)
    return {**all_upstreams, "west": west_upstream}


@pytest.fixture
def west(cloud):
    configure(
        name="us-west",
        base_url=cloud["west"].base_url,
        region=WEST,
        aws_access_key_id=AWS_ACCESS_KEY,
        aws_secret_access_key=AWS_SECRET_KEY,
    )
    return cloud


# --- titan-type and nova-type ---------------------------------------------------------------------


def test_titan_routing_field_mapping_cost_and_ledger(client, auth, cloud):
    response = generate(
        client,
        auth,
        {
            "model": TITAN,
            "prompt": "a quiet harbour",
            "negative_prompt": "boats",
            "seed": 7,
            "n": 2,
            "quality": "hd",
            "size": "1024x1024",
            **FOREIGN,
        },
    )
    assert response.status_code == 200, response.text
    fake = cloud["cloud"]
    sent = fake.last
    assert sent.raw_path == "/model/amazon.titan-image-generator-v2%3A0/invoke"
    assert fake.last_signature_valid is True
    assert sent.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={AWS_ACCESS_KEY}/"
    )
    assert "/us-east-1/bedrock/aws4_request" in sent.headers["authorization"]
    assert sent.json == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "a quiet harbour", "negativeText": "boats"},
        "imageGenerationConfig": {
            "numberOfImages": 2,
            "quality": "premium",
            "width": 1024,
            "height": 1024,
            "seed": 7,
        },
    }
    assert cloud["direct"].requests == []
    body = response.json()
    assert (body["created"], body["model"]) == (0, TITAN)
    assert len(body["data"]) == 2
    for item in body["data"]:
        assert decoded_png(item["b64_json"])["width"] == 16
        assert (item["seed"], item["watermark"], item["revised_prompt"], item["flagged"]) == (
            7,
            "provenance",
            None,
            False,
        )
    assert body["usage"] == {
        "images": 2,
        "input_tokens": None,
        "output_tokens": None,
        "total_tokens": None,
        "megapixels": 2.0972,
        "credits_used": 28_000,  # premium 1024x1024, 0.014 USD each
        "credits_remaining": None,
    }
    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == (
        "image_generation",
        TITAN,
        TITAN,
    )
    assert (row.provider, row.connection, row.status_code) == ("cloud", "default", 200)
    assert (row.images, row.megapixels, row.credits) == (2, Decimal("2.0972"), 28_000)
    assert row.prompt_tokens is None


@pytest.mark.parametrize(
    "size,quality,width,height,credits",
    [
        ("512x512", None, 512, 512, 8_000),
        ("512x512", "high", 512, 512, 10_000),
        ("auto", "standard", 1024, 1024, 10_000),
        ("1792x1024", "medium", 1152, 640, 10_000),
    ],
)
def test_titan_sizes_and_qualities(client, auth, cloud, size, quality, width, height, credits):
    body = {"model": TITAN, "prompt": "owl", "size": size}
    if quality:
        body["quality"] = quality
    response = generate(client, auth, body)
    assert response.status_code == 200, response.text
    config = cloud["cloud"].last.json["imageGenerationConfig"]
    assert (config["width"], config["height"]) == (width, height)
    assert config["quality"] == ("premium" if quality == "high" else "standard")
    assert "seed" not in config and "negativeText" not in cloud["cloud"].last.json
    assert response.json()["data"][0]["seed"] is None
    assert response.json()["usage"]["credits_used"] == credits


@pytest.mark.parametrize(
    "extra,config,credits",
    [
        (
            {"size": "4096x4096"},
            {"numberOfImages": 1, "quality": "standard", "width": 2048, "height": 2048},
            60_000,
        ),
        (
            {"size": "1024x1024", "quality": "hd", "seed": 5, "n": 3},
            {"numberOfImages": 3, "quality": "premium", "width": 1024, "height": 1024, "seed": 5},
            3 * 60_000,
        ),
        (
            {"size": "1920x1080"},
            {"numberOfImages": 1, "quality": "standard", "width": 1920, "height": 1072},
            60_000,
        ),
    ],
)
def test_nova(client, auth, cloud, extra, config, credits):
    response = generate(
        client, auth, {"model": NOVA, "prompt": "a map", "negative_prompt": "text", **extra}
    )
    assert response.status_code == 200, response.text
    sent = cloud["cloud"].last
    assert sent.raw_path == "/model/amazon.nova-canvas-v1%3A0/invoke"
    assert sent.json == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "a map", "negativeText": "text"},
        "imageGenerationConfig": config,
    }
    body = response.json()
    assert len(body["data"]) == config["numberOfImages"]
    assert {item["watermark"] for item in body["data"]} == {"provenance"}
    assert {item["seed"] for item in body["data"]} == {config.get("seed")}
    assert body["usage"]["credits_used"] == credits
    assert Transaction.objects.get().credits == credits


@pytest.mark.parametrize("model", [TITAN, NOVA])
def test_titan_and_nova_content_filter_is_flagged(client, auth, cloud, model):
    response = generate(client, auth, {"model": model, "prompt": "a forbidden thing", "n": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"] == [
        {
            "b64_json": "",
            "revised_prompt": None,
            "seed": None,
            "watermark": "provenance",
            "flagged": True,
        }
    ]
    assert (body["usage"]["images"], body["usage"]["credits_used"]) == (0, 0)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.images) == (200, 0, 0)


# --- stability-type: one region only --------------------------------------------------------------


@pytest.mark.parametrize("model,credits", [(CORE, 30_000), (ULTRA, 80_000), (LARGE, 65_000)])
def test_stability_goes_to_its_region(client, auth, west, model, credits):
    response = generate(
        client,
        auth,
        {
            "model": model,
            "prompt": "a castle",
            "size": "1792x1024",
            "negative_prompt": "fog",
            "seed": 99,
            "quality": "hd",
            **FOREIGN,
        },
    )
    assert response.status_code == 200, response.text
    assert west["cloud"].requests == []
    fake = west["west"]
    assert fake.last_signature_valid is True
    assert f"/{WEST}/bedrock/aws4_request" in fake.last.headers["authorization"]
    assert fake.last.path == f"/model/{model}/invoke"
    assert fake.last.json == {
        "prompt": "a castle",
        "aspect_ratio": "16:9",
        "output_format": "png",
        "negative_prompt": "fog",
        "seed": 99,
    }
    body = response.json()
    (item,) = body["data"]
    picture = decoded_png(item["b64_json"])
    assert (picture["width"], picture["height"]) == (16, 9)
    assert (item["seed"], item["watermark"], item["revised_prompt"]) == (99, "none", None)
    assert body["usage"]["credits_used"] == credits
    assert body["usage"]["megapixels"] == 1.0322  # 1344x768
    row = Transaction.objects.get()
    assert (row.provider, row.connection, row.billed_model) == ("cloud", "us-west", model)
    assert (row.images, row.credits) == (1, credits)


def test_stability_makes_one_image_per_request(client, auth, west):
    response = generate(client, auth, {"model": CORE, "prompt": "a castle", "n": 3})
    assert response.status_code == 200
    assert "n" not in west["west"].last.json
    body = response.json()
    assert len(body["data"]) == 1 and isinstance(body["data"][0]["seed"], int)
    assert (body["usage"]["images"], body["usage"]["credits_used"]) == (1, 30_000)


def test_stability_filter_is_flagged(client, auth, west):
    response = generate(client, auth, {"model": ULTRA, "prompt": "forbidden"})
    assert response.status_code == 200
    body = response.json()
    assert body["data"][0]["flagged"] is True and body["data"][0]["watermark"] == "none"
    assert (body["usage"]["images"], body["usage"]["credits_used"]) == (0, 0)
    assert Transaction.objects.get().credits == 0


def test_stability_without_a_connection_in_its_region(client, auth, cloud):
    response = generate(client, auth, {"model": CORE, "prompt": "a castle"})
    assert error(response, 400) == (
        f"Model '{CORE}' is only available in region 'us-west-2', and connection 'default' is "
        "in 'us-east-1'; configure a 'cloud' connection in 'us-west-2'"
    )
    assert cloud["cloud"].requests == [] and refusal_codes() == ["provider_selection"]


def test_stability_pinned_to_a_connection_elsewhere(client, auth, west):
    configure(
        name="east-2",
        base_url=west["cloud"].base_url,
        region="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY,
        aws_secret_access_key=AWS_SECRET_KEY,
    )
    pinned = {"X-Service-Provider": "cloud/east-2"}
    response = generate(client, auth, {"model": CORE, "prompt": "a castle"}, **pinned)
    assert "connection 'east-2' is in 'us-east-1'" in error(response, 400)
    assert west["west"].requests == []
    # the same pin serves the models that are not region-bound
    assert generate(client, auth, {"model": TITAN, "prompt": "owl"}, **pinned).status_code == 200
    assert Transaction.objects.get(outcome="success").connection == "east-2"


def test_stability_pinned_to_its_region(client, auth, west):
    pinned = {"X-Service-Provider": "cloud/us-west"}
    response = generate(client, auth, {"model": LARGE, "prompt": "a castle"}, **pinned)
    assert response.status_code == 200
    assert len(west["west"].requests) == 1


# --- routing --------------------------------------------------------------------------------------


def test_rows_are_inactive_by_default(client, auth, all_upstreams):
    response = generate(client, auth, {"model": TITAN, "prompt": "owl"})
    assert error(response, 400) == f"No active provider for model '{TITAN}'"
    assert all_upstreams["cloud"].requests == []


def test_embeddings_model_has_no_image_output(client, auth, cloud):
    model = "amazon.titan-embed-text-v2:0"
    response = generate(client, auth, {"model": model, "prompt": "owl"})
    assert error(response, 400) == (
        f"No available provider for model '{model}' supports image output"
    )


@pytest.mark.parametrize("pin", ["direct", "multimodal", "cloud/nope"])
def test_pin_without_a_row_for_the_model(client, auth, cloud, pin):
    response = generate(
        client, auth, {"model": TITAN, "prompt": "owl"}, **{"X-Service-Provider": pin}
    )
    assert error(response, 400) == (
        "No provider available for endpoint 'image_generation' under the current pins"
    )
    assert cloud["cloud"].requests == []


def test_pin_cloud(client, auth, cloud):
    response = generate(
        client, auth, {"model": TITAN, "prompt": "owl"}, **{"X-Service-Provider": "cloud/default"}
    )
    assert response.status_code == 200


def test_connection_without_iam_credentials(client, auth, cloud):
    configure(base_url=cloud["cloud"].base_url, aws_access_key_id="", aws_secret_access_key="")
    response = generate(client, auth, {"model": TITAN, "prompt": "owl"})
    assert error(response, 400) == (
        "Connection 'default' is misconfigured: missing IAM credentials"
    )


# --- failures -------------------------------------------------------------------------------------


def test_wrong_secret_fails_the_signature_check(client, auth, cloud):
    configure(base_url=cloud["cloud"].base_url, aws_secret_access_key="not-the-secret")
    response = generate(client, auth, {"model": TITAN, "prompt": "owl"})
    assert error(response, 503) == "Service temporarily unavailable"
    assert cloud["cloud"].last_signature_valid is False
    assert Transaction.objects.get().status_code == 503


def test_provider_names_are_removed_from_messages(client, auth, cloud):
    cloud["cloud"].fail_next(
        status=400, body={"message": "Amazon Bedrock could not read the Titan request."}
    )
    message = error(generate(client, auth, {"model": TITAN, "prompt": "owl"}), 400)
    assert message == "could not read the request."

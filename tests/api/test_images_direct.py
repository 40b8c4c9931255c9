"""POST /v1/images/generations on the `direct` provider (OpenAI Images API) end to end."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from fake_upstreams import png
from licensing.models import Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
GPT_IMAGE = "gpt-image-1"


def generate(client, auth, body, **headers):
    return client.post("/v1/images/generations", json=body, headers={**auth, **headers})


def decoded_png(b64: str) -> dict:
    return png.read_png(base64.b64decode(b64))


@pytest.fixture
def retired(catalog, activate_rows):
    """The retired models' rows enabled, as an operator could."""
    activate_rows("dall-e-2", "dall-e-3")
    return catalog


# --- the token-priced model -----------------------------------------------------------------------


def test_sdk_generate_returns_png(sdk, catalog):
    result = sdk.images.generate(model=GPT_IMAGE, prompt="a red fox in the snow")
    assert len(result.data) == 1
    picture = decoded_png(result.data[0].b64_json)
    assert (picture["width"], picture["height"]) == (16, 16)
    assert result.data[0].url is None
    extra = result.data[0].model_extra
    assert (extra["watermark"], extra["flagged"], extra["seed"]) == ("c2pa", False, None)
    assert result.usage.input_tokens == 6 and result.usage.output_tokens == 4160
    assert catalog["direct"].last.json == {
        "model": GPT_IMAGE,
        "prompt": "a red fox in the snow",
        "n": 1,
        "size": "1024x1024",
    }
    assert catalog["direct"].last.headers["authorization"] == "Bearer sk-upstream-test"


def test_gpt_image_field_mapping_cost_and_ledger(client, auth, catalog):
    prompt = "a lighthouse at dusk"
    response = generate(
        client,
        auth,
        {
            "model": GPT_IMAGE,
            "prompt": prompt,
            "size": "1792x1024",
            "quality": "hd",
            "style": "vivid",
            "background": "transparent",
            "output_format": "webp",
            "output_compression": 80,
            "moderation": "low",
            "seed": 42,
            "negative_prompt": "people",
            "user": "stu-1",
        },
    )
    assert response.status_code == 200, response.text
    # style is for the retired family, seed and negative_prompt have no field on this API
    assert catalog["direct"].last.json == {
        "model": GPT_IMAGE,
        "prompt": prompt,
        "n": 1,
        "size": "1536x1024",
        "quality": "high",
        "background": "transparent",
        "output_format": "webp",
        "output_compression": 80,
        "moderation": "low",
        "user": "stu-1",
    }
    body = response.json()
    assert body["model"] == GPT_IMAGE and body["created"] > 0
    assert [set(item) for item in body["data"]] == [
        {"b64_json", "revised_prompt", "seed", "watermark", "flagged"}
    ]
    item = body["data"][0]
    assert (item["revised_prompt"], item["seed"], item["watermark"], item["flagged"]) == (
        None,
        None,
        "c2pa",
        False,
    )
    assert decoded_png(item["b64_json"])["width"] == 16
    # 4 prompt tokens x 5 + 6240 output tokens (high, not square) x 40 micro-credits
    credits = 4 * 5 + 6240 * 40
    assert body["usage"] == {
        "images": 1,
        "input_tokens": 4,
        "output_tokens": 6240,
        "total_tokens": 6244,
        "megapixels": None,
        "credits_used": credits,
        "credits_remaining": None,
    }
    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == (
        "image_generation",
        GPT_IMAGE,
        GPT_IMAGE,
    )
    assert (row.provider, row.connection, row.status_code) == ("direct", "default", 200)
    assert (row.prompt_tokens, row.completion_tokens, row.total_tokens) == (4, 6240, 6244)
    assert (row.images, row.megapixels, row.credits) == (1, None, credits)


@pytest.mark.parametrize(
    "size,quality,sent_size,sent_quality,output_tokens",
    [
        ("1024x1024", "standard", "1024x1024", "medium", 1056),
        ("1024x1792", "low", "1024x1536", "low", 408),
        ("auto", "auto", "auto", "auto", 4160),
        ("512x512", "medium", "1024x1024", "medium", 1056),
    ],
)
def test_gpt_image_size_and_quality(
    client, auth, catalog, size, quality, sent_size, sent_quality, output_tokens
):
    response = generate(
        client, auth, {"model": GPT_IMAGE, "prompt": "owl", "size": size, "quality": quality}
    )
    assert response.status_code == 200, response.text
    sent = catalog["direct"].last.json
    assert (sent["size"], sent["quality"]) == (sent_size, sent_quality)
    assert response.json()["usage"]["credits_used"] == 1 * 5 + output_tokens * 40


def test_gpt_image_jpeg_output_is_passed_through(client, auth, catalog):
    response = generate(
        client, auth, {"model": GPT_IMAGE, "prompt": "owl", "output_format": "jpeg"}
    )
    assert response.status_code == 200
    assert catalog["direct"].last.json["output_format"] == "jpeg"


def test_moderation_block_is_a_free_flagged_answer(client, auth, catalog):
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "something forbidden"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"] == [
        {"b64_json": "", "revised_prompt": None, "seed": None, "watermark": "c2pa", "flagged": True}
    ]
    assert body["usage"]["images"] == 0 and body["usage"]["credits_used"] == 0
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.images) == (200, 0, 0)


# --- the retired models ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["dall-e-2", "dall-e-3"])
def test_retired_models_are_400(client, auth, catalog, model):
    response = generate(client, auth, {"model": model, "prompt": "owl"})
    assert error(response, 400) == f"No active provider for model '{model}'"
    assert catalog["direct"].requests == [] and refusal_codes() == ["provider_selection"]


def test_dall_e_3_when_enabled(client, auth, retired):
    response = generate(
        client,
        auth,
        {
            "model": "dall-e-3",
            "prompt": "owl",
            "size": "1024x1792",
            "quality": "hd",
            "style": "natural",
            "background": "opaque",
            "seed": 3,
            "user": "stu-2",
        },
    )
    assert response.status_code == 200, response.text
    generation, download = retired["direct"].requests
    assert generation.json == {
        "model": "dall-e-3",
        "prompt": "owl",
        "n": 1,
        "size": "1024x1792",
        "quality": "hd",
        "style": "natural",
        "user": "stu-2",
    }
    # the provider answered with a URL; the gateway fetched it and answers base64 only
    assert download.method == "GET" and download.path.startswith("/files/")
    assert "authorization" not in download.headers
    item = response.json()["data"][0]
    assert "url" not in item and decoded_png(item["b64_json"])["height"] == 16
    assert item["revised_prompt"] == "A detailed, high-quality image of owl"
    assert item["watermark"] == "none"
    usage = response.json()["usage"]
    assert (usage["input_tokens"], usage["megapixels"]) == (None, 1.835)
    assert usage["credits_used"] == 120_000  # hd, 1024x1792
    row = Transaction.objects.get()
    assert (row.images, row.megapixels, row.credits) == (1, Decimal("1.835"), 120_000)


def test_dall_e_2_when_enabled(client, auth, retired):
    response = generate(
        client, auth, {"model": "dall-e-2", "prompt": "owl", "n": 2, "size": "500x500"}
    )
    assert response.status_code == 200, response.text
    assert retired["direct"].requests[0].json == {
        "model": "dall-e-2",
        "prompt": "owl",
        "n": 2,
        "size": "512x512",
    }
    data = response.json()["data"]
    assert len(data) == 2 and all(decoded_png(item["b64_json"]) for item in data)
    assert response.json()["usage"]["credits_used"] == 2 * 18_000
    assert Transaction.objects.get().credits == 36_000


def test_dall_e_content_policy_violation_is_flagged(client, auth, retired):
    response = generate(client, auth, {"model": "dall-e-3", "prompt": "forbidden"})
    assert response.status_code == 200
    assert response.json()["data"][0]["flagged"] is True
    assert response.json()["usage"]["credits_used"] == 0


# --- routing --------------------------------------------------------------------------------------


def test_embeddings_model_has_no_image_output(client, auth, catalog):
    response = generate(client, auth, {"model": "text-embedding-3-small", "prompt": "owl"})
    assert error(response, 400) == (
        "No available provider for model 'text-embedding-3-small' supports image output"
    )
    assert catalog["direct"].requests == [] and refusal_codes() == ["provider_selection"]


@pytest.mark.parametrize("pin", ["cloud", "multimodal", "aggregator", "direct/other"])
def test_pin_without_a_row_for_the_model(client, auth, catalog, pin):
    response = generate(
        client, auth, {"model": GPT_IMAGE, "prompt": "owl"}, **{"X-Service-Provider": pin}
    )
    assert error(response, 400) == (
        "No provider available for endpoint 'image_generation' under the current pins"
    )
    assert catalog["direct"].requests == []


def test_pin_direct(client, auth, catalog):
    response = generate(
        client, auth, {"model": GPT_IMAGE, "prompt": "owl"}, **{"X-Service-Provider": "direct"}
    )
    assert response.status_code == 200


def test_unknown_model_is_forwarded_unchanged(client, auth, catalog):
    response = generate(client, auth, {"model": "gpt-image-9", "prompt": "owl"})
    assert "gpt-image-9" in error(response, 404)
    assert catalog["direct"].last.json["model"] == "gpt-image-9"
    assert Transaction.objects.get().status_code == 404


# --- failures -------------------------------------------------------------------------------------


def test_expired_image_url_is_503(client, auth, retired):
    retired["direct"].fail_next(
        status=200,
        body={"created": 1, "data": [{"url": retired["direct"].origin + "/files/x.png"}]},
    )
    response = generate(client, auth, {"model": "dall-e-2", "prompt": "owl"})
    assert error(response, 503) == "Service temporarily unavailable"
    assert Transaction.objects.get().credits == 0


@pytest.mark.parametrize(
    "extra,type_,loc",
    [
        ({"response_format": "b64_json"}, "extra_forbidden", ["body", "response_format"]),
        ({"stream": True}, "extra_forbidden", ["body", "stream"]),
        ({"n": 11}, "less_than_equal", ["body", "n"]),
        ({"output_compression": 101}, "less_than_equal", ["body", "output_compression"]),
        ({"quality": "ultra"}, "literal_error", ["body", "quality"]),
        ({"n": "2"}, "int_type", ["body", "n"]),
    ],
)
def test_validation(client, auth, catalog, extra, type_, loc):
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", **extra})
    assert response.status_code == 422
    item = response.json()["detail"][0]
    assert (item["type"], item["loc"]) == (type_, loc)
    assert catalog["direct"].requests == []


def test_policy_on_image_generation(client, catalog, make_license, make_key):
    policy = {
        "version": 1,
        "services": {"image_generation": {"params": {"quality": {"excluded": ["hd"]}}}},
    }
    auth = {"Authorization": f"Bearer {make_key(make_license(name='img', policy=policy))}"}
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", "quality": "hd"})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "'quality' value 'hd' is not permitted for this license",
        "code": "policy_denied",
        "param": "quality",
    }
    assert catalog["direct"].requests == []


def test_budget_is_charged(client, catalog, make_license, make_key):
    license = make_license(name="limited", limit=1_000_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", "quality": "low"})
    usage = response.json()["usage"]
    assert usage["credits_used"] == 5 + 272 * 40
    assert usage["credits_remaining"] == 1_000_000 - usage["credits_used"]


# --- answers without token counts are billed per megapixel, at the list price ------------------


@pytest.mark.parametrize(
    "extra,sent_size,credits,megapixels",
    [
        ({}, "1024x1024", 167_000, 1.0486),  # no quality: the provider makes (and bills) high
        ({"quality": "low"}, "1024x1024", 11_000, 1.0486),
        ({"quality": "medium", "size": "1536x1024"}, "1536x1024", 63_000, 1.5729),
        ({"quality": "hd", "size": "1792x1024"}, "1536x1024", 250_000, 1.5729),
        ({"quality": "low", "size": "1024x1536"}, "1024x1536", 16_000, 1.5729),
    ],
)
def test_gpt_image_without_token_counts_is_billed_at_the_list_price(
    client, catalog, make_license, make_key, extra, sent_size, credits, megapixels
):
    catalog["direct"].image_usage = False
    license = make_license(name="limited", limit=1_000_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", **extra})
    assert response.status_code == 200, response.text
    assert catalog["direct"].last.json["size"] == sent_size
    assert response.json()["usage"] == {
        "images": 1,
        "input_tokens": None,
        "output_tokens": None,
        "total_tokens": None,
        "megapixels": megapixels,
        "credits_used": credits,
        "credits_remaining": 1_000_000 - credits,
    }
    row = Transaction.objects.get()
    assert (row.prompt_tokens, row.completion_tokens, row.images) == (None, None, 1)
    assert (row.megapixels, row.credits) == (Decimal(str(megapixels)), credits)
    assert Wallet.objects.get().spent == credits


def test_per_megapixel_fallback_scales_unlisted_sizes():
    from catalog.defaults import MODELS
    from inference.billing import Usage, credits_for

    costs = {entry["model_id"]: entry["cost"] for entry in MODELS}
    gpt_image, flash = costs[GPT_IMAGE], costs["gemini-2.5-flash-image"]
    # Four times the pixels of the listed square size: four times its price.
    assert credits_for(gpt_image, Usage(images=1, size="2048x2048", quality="high")) == 668_000
    assert credits_for(gpt_image, Usage(images=2, size="1024x1024", quality="auto")) == 334_000
    assert credits_for(gpt_image, Usage(images=1, size="auto", quality="low")) == 11_000
    assert credits_for(flash, Usage(images=1, size="1024x1024")) == 38_700
    # rounded up to a whole micro-credit
    assert credits_for(flash, Usage(images=1, size="1344x768")) == -(
        -38_700 * 1344 * 768 // 1024**2
    )
    # Token counts, when present, decide.
    assert credits_for(gpt_image, Usage(prompt_tokens=1, completion_tokens=2, images=1)) == 85


@pytest.mark.parametrize(
    "size,sent",
    [("8x8", "1024x1024"), ("auto", "auto"), ("100000x1", "1536x1024"), ("3x4", "1024x1536")],
)
def test_any_positive_wxh_size_is_accepted_and_snapped(client, auth, catalog, size, sent):
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", "size": size})
    assert response.status_code == 200, response.text
    assert catalog["direct"].last.json["size"] == sent


@pytest.mark.parametrize(
    "size,type_",
    [
        ("100001x8", "value_error"),
        ("8x1000000", "string_pattern_mismatch"),
        ("0x8", "string_pattern_mismatch"),
        ("8X8", "string_pattern_mismatch"),
        ("-8x8", "string_pattern_mismatch"),
        ("8x8x8", "string_pattern_mismatch"),
    ],
)
def test_absurd_sizes_are_422(client, auth, catalog, size, type_):
    response = generate(client, auth, {"model": GPT_IMAGE, "prompt": "owl", "size": size})
    assert response.status_code == 422, response.text
    item = response.json()["detail"][0]
    assert (item["type"], item["loc"], item["input"]) == (type_, ["body", "size"], size)
    assert catalog["direct"].requests == []

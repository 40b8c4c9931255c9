"""POST /v1/images/generations on `multimodal` (the Gemini API): imagen-type models through
`:predict`, the flash-image model through `:generateContent`, end to end over HTTP."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from catalog.models import Connection
from licensing.models import Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)

FAST = "imagen-4.0-fast-generate-001"
STANDARD = "imagen-4.0-generate-001"
ULTRA = "imagen-4.0-ultra-generate-001"
FLASH = "gemini-2.5-flash-image"
UNAVAILABLE = "Service temporarily unavailable"


def generate(client, auth, body, **headers):
    return client.post("/v1/images/generations", json=body, headers={**auth, **headers})


def is_png(b64: str) -> bool:
    return base64.b64decode(b64).startswith(b"\x89PNG\r\n\x1a\n")


def only_call(fake):
    assert len(fake.requests) == 1, [r.path for r in fake.requests]
    return fake.requests[0]


# --- the four models --------------------------------------------------------------------------


def test_imagen_fast_routed_by_ownership(client, auth, all_upstreams, activate_rows):
    activate_rows(FAST)
    gemini = all_upstreams["multimodal"]
    response = generate(
        client,
        auth,
        {
            "model": FAST,
            "prompt": "a red fox in the snow",
            "n": 2,
            "size": "1792x1024",
            # Fields the spec gives to other providers' models: never sent to this one.
            "quality": "hd",
            "style": "vivid",
            "background": "transparent",
            "output_format": "jpeg",
            "output_compression": 50,
            "moderation": "low",
            "seed": 42,
            "negative_prompt": "dogs",
            "user": "stu-1",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["created"] == 0 and body["model"] == FAST
    assert len(body["data"]) == 2
    for item in body["data"]:
        assert is_png(item["b64_json"])
        assert (item["watermark"], item["flagged"]) == ("synthid", False)
        assert item["revised_prompt"] is None and item["seed"] is None
    assert body["usage"] == {
        "images": 2,
        "input_tokens": None,
        "output_tokens": None,
        "total_tokens": None,
        "megapixels": 2.1627,  # two 16:9 1K images: 1408x768
        "credits_used": 40000,  # 2 x 0.020 USD
        "credits_remaining": None,
    }
    sent = only_call(gemini)
    assert sent.path == f"/v1beta/models/{FAST}:predict"
    assert sent.headers["x-goog-api-key"] == "sk-upstream-test"
    assert sent.json == {
        "instances": [{"prompt": "a red fox in the snow"}],
        "parameters": {"sampleCount": 2, "aspectRatio": "16:9", "includeRaiReason": True},
    }
    assert all_upstreams["direct"].requests == []
    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == ("image_generation", FAST, FAST)
    assert (row.provider, row.connection, row.status_code) == ("multimodal", "default", 200)
    assert (row.images, row.megapixels, row.credits) == (2, Decimal("2.1627"), 40000)
    assert row.prompt_tokens is None and row.request_id == response.headers["X-Request-Id"]


@pytest.mark.parametrize(
    "size,aspect,image_size,megapixels",
    [
        ("1024x1024", "1:1", "1K", 1.0486),
        ("auto", "1:1", "1K", 1.0486),
        ("2048x2048", "1:1", "2K", 4.1943),
        ("1024x1536", "3:4", "2K", 4.5875),  # 1792x2560
    ],
)
def test_imagen_standard_by_header(
    client, auth, all_upstreams, activate_rows, size, aspect, image_size, megapixels
):
    activate_rows(STANDARD)
    response = generate(
        client,
        auth,
        {"model": STANDARD, "prompt": "a lighthouse", "size": size},
        **{"X-Service-Provider": "multimodal"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["data"]) == 1 and body["data"][0]["watermark"] == "synthid"
    assert body["usage"]["megapixels"] == megapixels
    assert body["usage"]["credits_used"] == 40000
    assert only_call(all_upstreams["multimodal"]).json["parameters"] == {
        "sampleCount": 1,
        "aspectRatio": aspect,
        "sampleImageSize": image_size,
        "includeRaiReason": True,
    }
    row = Transaction.objects.get()
    assert (row.provider, row.billed_model, row.images, row.credits) == (
        "multimodal",
        STANDARD,
        1,
        40000,
    )


def test_imagen_ultra_with_a_budget(client, all_upstreams, activate_rows, make_license, make_key):
    activate_rows(ULTRA)
    license = make_license(name="limited", limit=1_000_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = generate(
        client,
        auth,
        {"model": ULTRA, "prompt": "a tall tower", "n": 3, "size": "1024x1792"},
        **{"X-Service-Provider": "multimodal/default"},
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert (usage["images"], usage["credits_used"], usage["credits_remaining"]) == (
        3,
        180000,
        820000,
    )
    assert only_call(all_upstreams["multimodal"]).json["parameters"] == {
        "sampleCount": 3,
        "aspectRatio": "9:16",
        "sampleImageSize": "2K",  # the longer edge asked for is over 1024
        "includeRaiReason": True,
    }
    assert Wallet.objects.get().spent == 180000
    row = Transaction.objects.get()
    assert (row.images, row.credits, row.wallet_id) == (3, 180000, Wallet.objects.get().pk)


def test_flash_image_is_token_priced_and_revises_the_prompt(
    client, auth, all_upstreams, activate_rows
):
    activate_rows(FLASH)
    gemini = all_upstreams["multimodal"]
    gemini.reply_text = "A cat wearing a hat."
    response = generate(
        client,
        auth,
        {
            "model": FLASH,
            "prompt": "draw a cat on a mat",
            "size": "1536x1024",
            "quality": "high",
            "seed": 7,
            "negative_prompt": "dogs",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["created"] == 0 and body["model"] == FLASH
    [item] = body["data"]
    assert is_png(item["b64_json"])
    assert item == {
        "b64_json": item["b64_json"],
        "revised_prompt": "A cat wearing a hat.",
        "seed": None,
        "watermark": "synthid",
        "flagged": False,
    }
    # 6 prompt tokens x 0.3 + (5 text + 1290 image tokens) x 30 = 38851.8 -> 38852
    assert body["usage"] == {
        "images": 1,
        "input_tokens": 6,
        "output_tokens": 1295,
        "total_tokens": 1301,
        "megapixels": None,
        "credits_used": 38852,
        "credits_remaining": None,
    }
    sent = only_call(gemini)
    assert sent.path == f"/v1beta/models/{FLASH}:generateContent"
    assert sent.headers["x-goog-api-key"] == "sk-upstream-test"
    assert sent.json == {
        "contents": [{"role": "user", "parts": [{"text": "draw a cat on a mat"}]}],
        "generationConfig": {
            "responseModalities": ["TEXT", "IMAGE"],
            "imageConfig": {"aspectRatio": "3:2"},
        },
    }
    row = Transaction.objects.get()
    assert (row.provider, row.billed_model, row.status_code) == ("multimodal", FLASH, 200)
    assert (row.prompt_tokens, row.completion_tokens, row.total_tokens) == (6, 1295, 1301)
    assert (row.images, row.megapixels, row.credits) == (1, None, 38852)


def test_flash_image_without_text_part_has_no_revised_prompt(
    client, auth, all_upstreams, activate_rows
):
    activate_rows(FLASH)
    all_upstreams["multimodal"].reply_text = ""
    response = generate(client, auth, {"model": FLASH, "prompt": "a boat"})
    assert response.status_code == 200, response.text
    assert response.json()["data"][0]["revised_prompt"] is None


def test_flash_image_n_above_one_is_the_providers_to_refuse(
    client, auth, all_upstreams, activate_rows
):
    activate_rows(FLASH)
    response = generate(client, auth, {"model": FLASH, "prompt": "a boat", "n": 2})
    assert error(response, 400) == f"Multiple candidates is not enabled for models/{FLASH}"
    assert only_call(all_upstreams["multimodal"]).json["generationConfig"]["candidateCount"] == 2
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (400, 0)


def test_imagen_n_above_four_is_the_providers_to_refuse(client, auth, all_upstreams, activate_rows):
    activate_rows(FAST)
    response = generate(client, auth, {"model": FAST, "prompt": "a boat", "n": 5})
    assert error(response, 400) == "sampleCount must be between 1 and 4, got 5."
    assert (Transaction.objects.get().status_code, Transaction.objects.get().credits) == (400, 0)


# --- blocked generations ----------------------------------------------------------------------

FLAGGED_USAGE = {
    "images": 0,
    "input_tokens": None,
    "output_tokens": None,
    "total_tokens": None,
    "megapixels": None,
    "credits_used": 0,
}


def assert_flagged(response, model):
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == model
    assert body["data"] == [
        {
            "b64_json": "",
            "revised_prompt": None,
            "seed": None,
            "watermark": "synthid",
            "flagged": True,
        }
    ]
    assert {k: v for k, v in body["usage"].items() if k != "credits_remaining"} == FLAGGED_USAGE
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.images, row.billed_model) == (200, 0, 0, model)


@pytest.mark.parametrize("mode", ["filter", "reject"])
def test_imagen_blocked(client, make_license, make_key, all_upstreams, activate_rows, mode):
    """`filter`: predictions carrying only `raiFilteredReason`; `reject`: the prompt filter's
    400 INVALID_ARGUMENT. Either way the provider blocked the content: 200, flagged, free."""
    activate_rows(ULTRA)
    all_upstreams["multimodal"].imagen_block_mode = mode
    license = make_license(name="limited", limit=500_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = generate(client, auth, {"model": ULTRA, "prompt": "something forbidden", "n": 2})
    assert_flagged(response, ULTRA)
    assert response.json()["usage"]["credits_remaining"] == 500_000
    assert only_call(all_upstreams["multimodal"]).json["parameters"]["includeRaiReason"] is True


def test_imagen_answer_without_predictions_is_flagged(client, auth, all_upstreams, activate_rows):
    activate_rows(FAST)
    all_upstreams["multimodal"].fail_next(status=200, body={})
    assert_flagged(generate(client, auth, {"model": FAST, "prompt": "a boat"}), FAST)


def test_imagen_partly_filtered_keeps_and_bills_what_passed(
    client, auth, all_upstreams, activate_rows
):
    activate_rows(FAST)
    image = base64.b64encode(b"\x89PNG\r\n\x1a\nrest").decode()
    all_upstreams["multimodal"].fail_next(
        status=200,
        body={
            "predictions": [
                {"bytesBase64Encoded": image, "mimeType": "image/png"},
                {"raiFilteredReason": "filtered"},
            ]
        },
    )
    response = generate(client, auth, {"model": FAST, "prompt": "two boats", "n": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(d["b64_json"], d["flagged"]) for d in body["data"]] == [(image, False)]
    assert (body["usage"]["images"], body["usage"]["credits_used"]) == (1, 20000)
    assert Transaction.objects.get().credits == 20000


def test_flash_image_text_only_answer_is_flagged(client, auth, all_upstreams, activate_rows):
    """A STOP answer with no image part (the model declined in words) is not charged."""
    activate_rows(FLASH)
    all_upstreams["multimodal"].fail_next(
        status=200,
        body={
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "I can't draw that."}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 4},
        },
    )
    assert_flagged(generate(client, auth, {"model": FLASH, "prompt": "a boat"}), FLASH)


@pytest.mark.parametrize("mode", ["image_safety", "prompt_blocked"])
def test_flash_image_blocked(client, auth, all_upstreams, activate_rows, mode):
    """`image_safety`: a candidate with finishReason IMAGE_SAFETY and no content;
    `prompt_blocked`: promptFeedback.blockReason and no candidates."""
    activate_rows(FLASH)
    all_upstreams["multimodal"].image_block_mode = mode
    response = generate(client, auth, {"model": FLASH, "prompt": "something forbidden"})
    assert_flagged(response, FLASH)
    row = Transaction.objects.get()
    assert (row.prompt_tokens, row.completion_tokens) == (None, None)


# --- what never reaches the provider ------------------------------------------------------------


def test_modality_mismatch(client, auth, all_upstreams):
    response = generate(client, auth, {"model": "gemini-embedding-001", "prompt": "a boat"})
    assert (
        error(response, 400)
        == "No available provider for model 'gemini-embedding-001' supports image output"
    )
    assert all_upstreams["multimodal"].requests == []
    assert refusal_codes() == ["provider_selection"]


@pytest.mark.parametrize("model", [FAST, STANDARD, ULTRA, FLASH])
def test_inactive_rows_are_400(client, auth, all_upstreams, model):
    for headers in ({}, {"X-Service-Provider": "multimodal"}):
        response = generate(client, auth, {"model": model, "prompt": "a boat"}, **headers)
        assert error(response, 400) == f"No active provider for model '{model}'"
    assert all_upstreams["multimodal"].requests == []
    assert refusal_codes() == ["provider_selection"] * 2


def test_pinning_multimodal_for_a_model_it_has_no_row_for(client, auth, all_upstreams):
    response = generate(
        client,
        auth,
        {"model": "gpt-image-1", "prompt": "a boat"},
        **{"X-Service-Provider": "multimodal"},
    )
    assert (
        error(response, 400)
        == "No provider available for endpoint 'image_generation' under the current pins"
    )
    assert all_upstreams["multimodal"].requests == []
    assert all_upstreams["direct"].requests == []


def test_missing_connection_key(client, auth, all_upstreams, activate_rows):
    activate_rows(FAST)
    Connection.objects.filter(provider__slug="multimodal").update(api_key="")
    from core.localcache import clear_all

    clear_all()
    response = generate(client, auth, {"model": FAST, "prompt": "a boat"})
    assert (
        error(response, 400)
        == "Connection 'default' is misconfigured: missing 'api_key' credential"
    )


# --- provider failures ----------------------------------------------------------------------------


def test_rejected_gateway_key_is_503(client, auth, all_upstreams, activate_rows):
    """Google answers an invalid key with 400 API_KEY_INVALID: the gateway's own credential,
    so the client sees 503, not the provider's 400."""
    activate_rows(FAST)
    connection = Connection.objects.get(provider__slug="multimodal")
    connection.api_key = "not-the-key"
    connection.save()
    response = generate(client, auth, {"model": FAST, "prompt": "a boat"})
    assert error(response, 503) == UNAVAILABLE
    assert only_call(all_upstreams["multimodal"]).headers["x-goog-api-key"] == "not-the-key"
    assert Transaction.objects.get().status_code == 503


def test_unknown_model_pinned_is_forwarded_and_sanitized(client, auth, all_upstreams):
    response = generate(
        client,
        auth,
        {"model": "imagen-9.0-generate", "prompt": "a boat"},
        **{"X-Service-Provider": "multimodal"},
    )
    message = error(response, 404)
    assert message.startswith("models/imagen-9.0-generate is not found for API version v1beta")
    assert "Call ListModels" in message
    assert (
        only_call(all_upstreams["multimodal"]).path == "/v1beta/models/imagen-9.0-generate:predict"
    )
    row = Transaction.objects.get()
    assert (row.provider, row.billed_model, row.status_code, row.credits) == (
        "multimodal",
        "",
        404,
        0,
    )

"""What a request costs, from the model's catalog cost structure and the usage
(inference.billing), without a server: every cost structure, cached prompts, the size and
quality fallbacks of image tables, and the rounding (up, to a whole micro-credit per request).

1 USD of list price = 1,000,000 micro-credits; the prices below are micro-credits per unit."""

from __future__ import annotations

from decimal import Decimal

import pytest

from inference.billing import Usage, credits_for, round_up

TOKENS = {"type": "per_token", "prompt": "0.15", "completion": "0.6"}


@pytest.mark.parametrize(
    ("usage", "credits"),
    [
        (Usage(prompt_tokens=1000, completion_tokens=100), 210),  # 150 + 60
        (Usage(prompt_tokens=1, completion_tokens=0), 1),  # 0.15 rounds up
        (Usage(prompt_tokens=0, completion_tokens=0), 0),  # zero stays zero
        (Usage(prompt_tokens=10), 2),  # embeddings: no completion tokens
        (Usage(), 0),
    ],
)
def test_per_token(usage, credits):
    assert credits_for(TOKENS, usage) == credits


def test_the_type_defaults_to_per_token():
    assert credits_for({"prompt": 2}, Usage(prompt_tokens=3)) == 6


def test_cached_prompt_tokens_are_priced_apart_and_never_more_than_the_prompt():
    cost = {**TOKENS, "cached_prompt": "0.075"}
    # 600 uncached at 0.15, 400 cached at 0.075, 100 completion at 0.6
    assert (
        credits_for(cost, Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=400))
        == 90 + 30 + 60
    )
    # More cached than prompt: all of the prompt at the cached price.
    assert credits_for(cost, Usage(prompt_tokens=100, cached_tokens=500)) == 8  # 7.5 up
    # Without a cached price the cached tokens are ordinary prompt tokens.
    assert credits_for(TOKENS, Usage(prompt_tokens=1000, cached_tokens=400)) == 150


def test_hosted_web_searches_are_added_to_the_tokens_at_their_fee():
    cost = {**TOKENS, "web_search_call": 11200}
    # 1000 prompt at 0.15 (150), 10 completion at 0.6 (6): 156, then 3 searches.
    usage = Usage(prompt_tokens=1000, completion_tokens=10, units=3)
    assert credits_for(cost, usage) == 156 + 3 * 11200
    # The fraction of the tokens is rounded up once, with the searches.
    assert credits_for({**cost, "web_search_call": 0.5}, usage) == 158
    # No fee, no searches billed: such a model is never sent the tool (endpoints.responses).
    assert credits_for(TOKENS, usage) == 156


def test_a_hosted_search_fee_is_checked_by_the_catalog():
    from django.core.exceptions import ValidationError

    from catalog.models import Model, cost_errors

    assert cost_errors({**TOKENS, "type": "per_token", "web_search_call": 10000}) == []
    assert cost_errors({"type": "per_token", "prompt": 1}) == []
    for bad in (-1, "10", True, None, float("nan"), float("inf")):
        assert cost_errors({"type": "per_token", "web_search_call": bad}), bad
    assert cost_errors({"type": "per_call", "call": 1, "web_search_call": 1})
    with pytest.raises(ValidationError, match="web_search_call"):
        Model(model_id="m", cost={"type": "per_token", "web_search_call": -1}).clean()


def test_per_image():
    assert credits_for({"type": "per_image", "image": 40000}, Usage(images=3)) == 120_000
    assert credits_for({"type": "per_image", "image": 40000}, Usage()) == 0


SIZES = {
    "type": "per_image_by_size",
    "sizes": {"256x256": 16000, "1024x1024": 20000, "512x512": 18000},
}


@pytest.mark.parametrize(
    ("size", "price"),
    [
        ("512x512", 18000),  # listed
        ("300x300", 18000),  # the next larger listed size, by pixels
        ("1024x768", 20000),
        ("4096x4096", 20000),  # larger than all: the largest
        (None, 16000),  # no size: the smallest covers zero pixels
        ("auto", 16000),
    ],
)
def test_per_image_by_size(size, price):
    assert credits_for(SIZES, Usage(images=2, size=size)) == 2 * price


QUALITIES = {
    "type": "per_image_by_size_quality",
    "qualities": {
        "standard": {"1024x1024": 40000, "1792x1024": 80000},
        "hd": {"1024x1024": 80000, "1792x1024": 120000},
    },
}


@pytest.mark.parametrize(
    ("quality", "size", "price"),
    [
        ("standard", "1024x1024", 40000),
        ("hd", "1792x1024", 120000),
        ("hd", "1200x1000", 120000),  # the next larger size of that quality
        ("ultra", "1024x1024", 80000),  # an unlisted quality: the most expensive one
        (None, "1024x1024", 80000),
    ],
)
def test_per_image_by_size_quality(quality, size, price):
    assert credits_for(QUALITIES, Usage(images=1, size=size, quality=quality)) == price


def test_per_megapixel_scale_prices_an_unlisted_size_by_its_pixels():
    cost = {
        "type": "per_image_by_size_quality",
        "scale": "megapixels",
        "qualities": {"standard": {"1024x1024": 40000, "1536x1024": 60000}},
    }
    assert credits_for(cost, Usage(images=1, size="1536x1024", quality="standard")) == 60000
    # 2048x2048 is nearest in aspect ratio to 1024x1024 and has four times its pixels.
    assert credits_for(cost, Usage(images=1, size="2048x2048", quality="standard")) == 160000
    # 3072x2048: 1536x1024's ratio, four times its pixels.
    assert credits_for(cost, Usage(images=2, size="3072x2048", quality="standard")) == 480000


def test_token_priced_images_without_token_counts_use_their_fallback_table():
    cost = {
        **TOKENS,
        "without_tokens": {"type": "per_image", "image": 39000},
    }
    # Token counts present: per token, the table is not used.
    assert credits_for(cost, Usage(prompt_tokens=10, completion_tokens=1000, images=1)) == 602
    # An image answer without them is billed by the table, never free.
    assert credits_for(cost, Usage(images=2)) == 78000
    # Without a table it is per token, on what is known.
    assert credits_for(TOKENS, Usage(images=2)) == 0


@pytest.mark.parametrize(
    ("cost", "units", "credits"),
    [
        ({"type": "per_call", "call": 5000}, 1, 5000),
        ({"type": "per_call", "call": "0.5"}, 3, 2),
        ({"type": "per_page", "page": 300}, 4, 1200),
        ({"type": "per_page", "page": 300}, None, 0),
    ],
)
def test_per_call_and_per_page(cost, units, credits):
    assert credits_for(cost, Usage(units=units)) == credits


def test_an_unknown_cost_structure_is_an_error_not_free():
    with pytest.raises(ValueError, match="unknown cost structure 'per_vibe'"):
        credits_for({"type": "per_vibe"}, Usage(prompt_tokens=1))


@pytest.mark.parametrize(
    ("amount", "credits"),
    [("0", 0), ("-3", 0), ("0.000001", 1), ("1", 1), ("1.5", 2), ("41999.0001", 42000)],
)
def test_round_up(amount, credits):
    assert round_up(Decimal(amount)) == credits

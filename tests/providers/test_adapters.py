"""Each adapter's request, without a server: the path, the headers and the body it sends for a
request, and what it makes of the answer or the error it gets back. The connection pool is
replaced by a recorder that answers from a list, so the adapter's own `request` (its auth
headers, its status mapping) runs as it does in production.

The status table itself, per adapter, is tests/providers/test_provider_status_mapping.py; the
same requests end to end, against the fake upstreams, are in tests/api/."""

from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace

import httpx
import orjson
import pytest

from catalog.routing import ConnectionInfo, ModelEntry, ProviderInfo, Route
from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE
from inference.providers import adapter_for
from inference.providers.base import GeneratedImages, ModerationResult, ProviderFailure
from inference.providers.bedrock import (
    BedrockTransport,
    image_family,
    invoke_path,
    signing_region,
    stability_image_body,
    titan_image_body,
)
from inference.providers.gemini import GeminiTransport, estimate_tokens
from inference.providers.openai import OpenAITransport, image_payload
from inference.providers.openrouter import OpenRouterTransport
from inference.providers.search import BraveTransport, OpenAlexTransport

BASE = "http://upstream.test/v1"


class Recorder:
    """Stands in for the connection's pool: records each call, answers from `answers`."""

    def __init__(self, answers: list[httpx.Response]):
        self.answers = list(answers)
        self.calls: list[SimpleNamespace] = []

    async def request(self, method, url, *, content, headers, params, max_bytes):
        self.calls.append(
            SimpleNamespace(
                method=method,
                url=url,
                body=orjson.loads(content) if content else None,
                headers=headers,
                params=params,
                max_bytes=max_bytes,
            )
        )
        return self.answers.pop(0)


def ok(body) -> httpx.Response:
    return httpx.Response(200, content=orjson.dumps(body))


def connection(**fields) -> ConnectionInfo:
    values = {
        "name": "default",
        "base_url": BASE,
        "api_key": "sk-test",
        "region": "",
        "aws_access_key_id": "",
        "aws_secret_access_key": "",
        "timeout": None,
        "updated_at": 0.0,
    } | fields
    return ConnectionInfo(**values)


def route(kind: str, upstream: str, *, options: dict | None = None, **conn) -> Route:
    info = connection(**conn)
    model = None
    if options is not None:
        model = ModelEntry(
            model_id=upstream,
            owned_by="p",
            supported_features=(),
            input_modality={},
            output_modality={},
            cost={},
            options=options,
            listed=True,
            rows=(),
        )
    return Route(
        endpoint="x",
        requested_model=upstream,
        upstream_model=upstream,
        provider=ProviderInfo(slug="p", kind=kind, connections={"default": info}),
        connection=info,
        model=model,
    )


def wired(adapter_class, *answers: httpx.Response):
    adapter = adapter_class()
    recorder = Recorder(list(answers))
    adapter.upstream = lambda _connection: recorder
    return adapter, recorder


def image_body(**fields) -> SimpleNamespace:
    values = {
        "prompt": "an owl",
        "n": 1,
        "size": "1024x1024",
        "quality": None,
        "style": None,
        "user": None,
        "background": None,
        "output_format": None,
        "output_compression": None,
        "moderation": None,
        "negative_prompt": None,
        "seed": None,
    } | fields
    return SimpleNamespace(**values)


def run(coroutine):
    return asyncio.run(coroutine)


# --- openai (direct) ---------------------------------------------------------------------------


def test_openai_chat_sends_the_effort_its_own_way():
    adapter, calls = wired(OpenAITransport, ok({"id": "c1"}))
    body = {"model": "o4-mini", "messages": [], "reasoning": {"effort": "low", "exclude": True}}
    assert run(adapter.chat(route("openai", "o4-mini"), body)) == {"id": "c1"}
    (call,) = calls.calls
    assert (call.method, call.url) == ("POST", f"{BASE}/chat/completions")
    assert call.headers["Authorization"] == "Bearer sk-test"
    assert call.body == {"model": "o4-mini", "messages": [], "reasoning_effort": "low"}


def test_openai_responses_take_the_effort_as_an_object_without_exclude():
    adapter = OpenAITransport()
    assert adapter.responses_payload({"reasoning_effort": "high"}) == {
        "reasoning": {"effort": "high"}
    }
    assert adapter.responses_payload({"reasoning": {"effort": "low", "exclude": True}}) == {
        "reasoning": {"effort": "low"}
    }


def test_openai_embeddings_are_sent_as_they_came_with_a_cap_per_input():
    adapter, calls = wired(OpenAITransport, ok({"data": []}), ok({"data": []}))
    payload = {"model": "text-embedding-3-small", "input": ["a", "b", "c"]}
    run(adapter.embeddings(route("openai", "text-embedding-3-small"), dict(payload)))
    run(adapter.embeddings(route("openai", "text-embedding-3-small"), {**payload, "input": "a"}))
    first, second = calls.calls
    assert (first.url, first.body) == (f"{BASE}/embeddings", payload)
    assert first.max_bytes == 3 * second.max_bytes


def test_openai_moderation_asks_for_every_text_and_reads_every_result():
    scored = {"categories": {"violence": True, "odd": "yes"}, "category_scores": {"violence": 0.9}}
    flagged = ok({"results": [{"flagged": False}, {"flagged": True, **scored}]})
    adapter, calls = wired(OpenAITransport, flagged, ok({"results": [{"flagged": False}]}))
    moderation = route("openai", "omni-moderation-latest")
    assert run(adapter.moderate(moderation, ["a", "b"])) == [
        ModerationResult(flagged=False),
        ModerationResult(True, {"violence": True}, {"violence": 0.9}),  # "odd" left out
    ]
    assert calls.calls[0].body == {"model": "omni-moderation-latest", "input": ["a", "b"]}
    with pytest.raises(ProviderFailure) as failure:  # one result for two texts
        run(adapter.moderate(moderation, ["a", "b"]))
    assert (failure.value.status, failure.value.message) == (500, PROVIDER_ERROR)


@pytest.mark.parametrize(
    ("upstream", "options", "fields", "sent", "billed"),
    [
        (
            "gpt-image-1",
            {"family": "gpt-image"},
            {"size": "1000x1100", "quality": "hd", "background": "transparent", "style": "vivid"},
            {"size": "1024x1024", "quality": "high", "background": "transparent"},
            ("1024x1024", "high"),
        ),
        (
            "dall-e-3",
            None,
            {"size": "1800x1000", "style": "natural", "output_format": "png"},
            {"size": "1792x1024", "style": "natural"},
            ("1792x1024", "standard"),
        ),
        (
            "dall-e-3",
            None,
            {"quality": "high", "user": "u1"},
            {"size": "1024x1024", "quality": "hd", "user": "u1"},
            ("1024x1024", "hd"),
        ),
        (
            "dall-e-2",
            None,
            {"size": "300x300", "quality": "high"},
            {"size": "256x256"},
            ("256x256", None),
        ),
        (
            "some-image-model",
            None,
            {"size": "640x480", "quality": "low", "seed": 7, "negative_prompt": "rain"},
            {"size": "640x480", "quality": "low"},
            ("640x480", "low"),
        ),
    ],
    ids=["gpt-image", "dall-e-3", "dall-e-3-quality", "dall-e-2", "unknown-family"],
)
def test_openai_image_payload_per_family(upstream, options, fields, sent, billed):
    payload, size, quality = image_payload(
        route("openai", upstream, options=options), image_body(**fields)
    )
    assert payload == {"model": upstream, "prompt": "an owl", "n": 1, **sent}
    assert (size, quality) == billed


def test_openai_image_moderation_is_a_flagged_answer_and_urls_are_fetched():
    blocked = httpx.Response(
        400, json={"error": {"message": "Rejected.", "code": "moderation_blocked"}}
    )
    adapter, _ = wired(OpenAITransport, blocked)
    dalle = route("openai", "dall-e-3")
    assert run(adapter.generate_images(dalle, image_body())) == GeneratedImages(flagged=True)

    adapter, _ = wired(OpenAITransport, ok({"created": 5, "data": [{"url": "https://files/x"}]}))

    async def download(url, *, max_bytes):
        assert url == "https://files/x"
        return httpx.Response(200, content=b"PNG")

    adapter.upstream(dalle.connection).download = download
    images = run(adapter.generate_images(dalle, image_body()))
    assert [i.b64_json for i in images.images] == [base64.b64encode(b"PNG").decode()]
    assert (images.created, images.size, images.quality) == (5, "1024x1024", "standard")


# --- openrouter (aggregator) -------------------------------------------------------------------


def test_openrouter_takes_the_effort_as_an_object_and_keeps_exclude():
    adapter = OpenRouterTransport()
    assert adapter.chat_payload({"reasoning_effort": "low"}) == {"reasoning": {"effort": "low"}}
    kept = {"reasoning": {"effort": "low", "exclude": True}}
    assert adapter.responses_payload(dict(kept)) == kept


def test_openrouter_drops_the_serving_vendor():
    adapter, _ = wired(OpenRouterTransport, ok({"choices": [], "provider": "SomeVendor"}))
    assert run(adapter.chat(route("openrouter", "openai/gpt-4o-mini"), {})) == {"choices": []}


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        ({"code": 429, "message": "Rate limited."}, 503, SERVICE_UNAVAILABLE),
        ({"code": 400, "message": "Bad thing happened."}, 400, "Bad thing happened."),
        ({"code": "oops", "message": "Bad thing happened."}, 503, SERVICE_UNAVAILABLE),
        ({"code": 200, "message": "Fine?"}, 500, PROVIDER_ERROR),
    ],
    ids=["429", "400", "no-code-is-502", "a-success-code"],
)
def test_openrouter_error_object_in_a_200_is_mapped_by_its_code(error, status, message):
    adapter, _ = wired(OpenRouterTransport, ok({"error": error}))
    with pytest.raises(ProviderFailure) as failure:
        run(adapter.chat(route("openrouter", "openai/gpt-4o-mini"), {}))
    assert (failure.value.status, failure.value.message) == (status, message)


# --- bedrock (cloud) ---------------------------------------------------------------------------


def test_bedrock_invoke_path_signs_for_the_connections_region():
    assert invoke_path("amazon.titan-embed-text-v2:0") == (
        "/model/amazon.titan-embed-text-v2%3A0/invoke"
    )
    assert signing_region(connection(region="eu-west-1")) == "eu-west-1"
    host = "https://bedrock-runtime.us-west-2.amazonaws.com"
    assert signing_region(connection(base_url=host)) == "us-west-2"
    assert signing_region(connection(base_url="http://127.0.0.1:9")) == "us-east-1"

    credentials = {"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "secret"}
    titan = route("bedrock", "amazon.titan-embed-text-v2:0", region="eu-west-1", **credentials)
    answer = httpx.Response(
        200, json={"embedding": [0.1]}, headers={"X-Amzn-Bedrock-Input-Token-Count": "3"}
    )
    adapter, calls = wired(BedrockTransport, answer)
    body, usage = run(adapter.invoke_embeddings(titan, {"inputText": "x"}))
    (call,) = calls.calls
    assert call.url == f"{BASE}/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert call.body == {"inputText": "x"}
    authorization = call.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/")
    assert "/eu-west-1/bedrock/aws4_request" in authorization
    assert (body, usage.prompt_tokens) == ({"embedding": [0.1]}, 3)


@pytest.mark.parametrize(
    ("upstream", "options", "family"),
    [
        ("amazon.titan-image-generator-v2:0", None, "titan"),
        ("amazon.nova-canvas-v1:0", None, "nova"),
        (
            "arn:aws:bedrock:us-west-2::foundation-model/stability.sd3-5-large-v1:0",
            None,
            "stability",
        ),
        ("my-custom-model", {"family": "nova"}, "nova"),
    ],
)
def test_bedrock_image_family(upstream, options, family):
    assert image_family(route("bedrock", upstream, options=options)) == family


def test_bedrock_titan_and_nova_bodies():
    body = image_body(size="1000x1000", quality="hd", n=2, seed=7, negative_prompt="rain")
    payload, size, quality = titan_image_body("titan", body)
    assert payload == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "an owl", "negativeText": "rain"},
        "imageGenerationConfig": {
            "numberOfImages": 2,
            "quality": "premium",
            "width": 1024,
            "height": 1024,
            "seed": 7,
        },
    }
    assert (size, quality) == ("1024x1024", "premium")
    # Nova: edges a multiple of 16 within 320..4096, at most 2048x2048 pixels, ratio kept.
    payload, size, quality = titan_image_body("nova", image_body(size="4096x4096"))
    assert (size, quality) == ("2048x2048", "standard")
    assert "seed" not in payload["imageGenerationConfig"]
    # 5000x100 asks for 500,000 pixels at 50:1: kept at 4:1, about as many pixels.
    assert titan_image_body("nova", image_body(size="5000x100"))[1] == "1408x352"


def test_bedrock_stability_body_has_no_count():
    payload = stability_image_body(image_body(size="1920x1080", n=3, seed=1))
    assert payload == {
        "prompt": "an owl",
        "aspect_ratio": "16:9",
        "output_format": "png",
        "seed": 1,
    }


# --- gemini (multimodal) -----------------------------------------------------------------------


def test_gemini_imagen_payload_and_size():
    predictions = {"predictions": [{"bytesBase64Encoded": "AAA"}, {"raiFilteredReason": "x"}]}
    adapter, calls = wired(GeminiTransport, ok(predictions))
    ultra = route("gemini", "imagen-4.0-ultra-generate-001", options={"family": "imagen"})
    images = run(adapter.generate_images(ultra, image_body(size="2048x1152", n=2)))
    (call,) = calls.calls
    assert call.url == f"{BASE}/models/imagen-4.0-ultra-generate-001:predict"
    assert call.headers["x-goog-api-key"] == "sk-test"
    assert call.body == {
        "instances": [{"prompt": "an owl"}],
        "parameters": {
            "sampleCount": 2,
            "aspectRatio": "16:9",
            "includeRaiReason": True,
            "sampleImageSize": "2K",
        },
    }
    assert [i.b64_json for i in images.images] == ["AAA"]
    assert (images.flagged, images.size) == (False, "2816x1536")


def test_gemini_flash_image_payload_asks_for_candidates_only_above_one():
    answer = {
        "candidates": [
            {"content": {"parts": [{"text": "A revised owl."}, {"inlineData": {"data": "BBB"}}]}}
        ]
    }
    adapter, calls = wired(GeminiTransport, ok(answer), ok(answer))
    flash = route("gemini", "gemini-2.5-flash-image")
    images = run(adapter.generate_images(flash, image_body(size="1344x768")))
    run(adapter.generate_images(flash, image_body(n=2)))
    one, two = calls.calls
    assert one.url == f"{BASE}/models/gemini-2.5-flash-image:generateContent"
    assert one.body == {
        "contents": [{"role": "user", "parts": [{"text": "an owl"}]}],
        "generationConfig": {
            "responseModalities": ["TEXT", "IMAGE"],
            "imageConfig": {"aspectRatio": "16:9"},
        },
    }
    assert two.body["generationConfig"]["candidateCount"] == 2
    assert [(i.b64_json, i.revised_prompt) for i in images.images] == [("BBB", "A revised owl.")]
    assert (images.input_tokens, images.size) == (None, "1344x768")


def test_gemini_embeddings_batch_and_count_with_the_title():
    vectors = {"embeddings": [{"values": [1.0]}, {"values": [2.0]}]}
    adapter, calls = wired(GeminiTransport, ok(vectors), ok({"totalTokens": 9}))
    model = route("gemini", "gemini-embedding-001")
    options = {"taskType": "RETRIEVAL_DOCUMENT", "title": "T"}
    assert run(adapter.embed(model, ["a", "b"], batch=True, options=options)) == (
        [[1.0], [2.0]],
        9,
    )
    embed, count = calls.calls
    assert embed.url == f"{BASE}/models/gemini-embedding-001:batchEmbedContents"
    assert embed.body == {
        "requests": [
            {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, **options}
            for t in ("a", "b")
        ]
    }
    assert count.url == f"{BASE}/models/gemini-embedding-001:countTokens"
    assert count.body == {
        "contents": [{"role": "user", "parts": [{"text": "T"}, {"text": t}]} for t in ("a", "b")]
    }


def test_gemini_count_that_fails_is_an_estimate():
    failed = httpx.Response(500, json={"error": {"message": "x"}})
    adapter, _ = wired(GeminiTransport, ok({"embedding": {"values": [1.0]}}), failed)
    model = route("gemini", "gemini-embedding-001")
    text = "eleven char"
    assert run(adapter.embed(model, [text], batch=False, options={})) == (
        [[1.0]],
        estimate_tokens(text),
    )


# --- search ------------------------------------------------------------------------------------


def test_brave_query_with_sites_and_country():
    answer = {"web": {"results": [{"url": "https://a.example", "title": "<b>A</b>"}]}}
    adapter, calls = wired(BraveTransport, ok(answer))
    body = SimpleNamespace(
        query="owls", search_domain_filter=["a.example", "b.example"], num_results=3, country="de"
    )
    hits = run(adapter.search(route("websearch", "web-search"), body))
    (call,) = calls.calls
    assert (call.method, call.url) == ("GET", f"{BASE}/res/v1/web/search")
    assert call.params == {
        "q": "owls (site:a.example OR site:b.example)",
        "count": 3,
        "country": "DE",
    }
    assert call.headers["X-Subscription-Token"] == "sk-test"
    assert [(h.url, h.title) for h in hits] == [("https://a.example", "A")]


@pytest.mark.parametrize(
    ("key", "extra"),
    [("me@example.org", {"mailto": "me@example.org"}), ("k-1", {"api_key": "k-1"}), ("", {})],
)
def test_openalex_query_and_its_key_or_address(key, extra):
    adapter, calls = wired(OpenAlexTransport, ok({"results": []}))
    body = SimpleNamespace(query="owls", num_results=5, country="fr")
    assert run(adapter.search(route("academic", "academic-search", api_key=key), body)) == []
    assert calls.calls[0].params == {
        "search": "owls",
        "per-page": 5,
        "filter": "authorships.institutions.country_code:FR",
        **extra,
    }


def test_every_adapter_is_one_instance_per_kind():
    assert adapter_for("openai") is adapter_for("openai")

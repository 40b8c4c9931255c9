"""The default catalog (decisions.md): providers, models, prices and provider rows.

Prices are list prices in micro-credits (1 USD = 1,000,000): per token for token-priced
models, per image otherwise.
"""

from .models import HOSTED_SEARCH

PROVIDERS = [
    ("direct", "openai", "Default direct provider (OpenAI REST API)"),
    ("aggregator", "openrouter", "Alternative provider, opt-in by header (OpenRouter)"),
    ("cloud", "bedrock", "Cloud image and embeddings provider (AWS Bedrock Runtime)"),
    ("multimodal", "gemini", "Second image provider (Google Gemini API)"),
    ("websearch", "websearch", "Web search API (Brave Search)"),
    ("academic", "academic", "Academic search API (OpenAlex)"),
    ("fetch", "fetch", "The gateway fetches URLs itself (POST /v1/fetch); no upstream"),
    ("azure", "azure_openai", "Azure OpenAI (deployments of OpenAI models; EU data zones)"),
    ("anthropic", "anthropic", "Anthropic's Claude models (Messages API)"),
    ("mistral", "openai_compatible", "Mistral AI's API (OpenAI-compatible; an EU provider)"),
]

TEXT = {"text": True, "image": False}
EMBEDDING_OUT = {"text": False, "image": False, "embedding": True}
IMAGE_OUT = {"text": False, "image": True}


def _embedding(model_id, owner, prompt, *, dims, accepts_dimensions, rows, native=None):
    return {
        "model_id": model_id,
        "owned_by": owner,
        "supported_features": ["embeddings"],
        "input_modality": TEXT,
        "output_modality": EMBEDDING_OUT,
        "cost": {"type": "per_token", "prompt": prompt},
        "options": {
            "accepts_dimensions": accepts_dimensions,
            "native_dimension": dims,
            **({"native_endpoint": native} if native else {}),
        },
        "rows": rows,
    }


def _image(model_id, owner, cost, *, watermark, family, rows, max_n, **options):
    return {
        "model_id": model_id,
        "owned_by": owner,
        "supported_features": ["image_generation"],
        "input_modality": TEXT,
        "output_modality": IMAGE_OUT,
        "cost": cost,
        "options": {"watermark": watermark, "family": family, "max_n": max_n, **options},
        "rows": rows,
    }


def _chat(
    model_id,
    owner,
    *,
    prompt,
    completion,
    cached=None,
    efforts=None,
    rows,
    inputs=None,
    web_search=None,
):
    cost = {"type": "per_token", "prompt": prompt, "completion": completion}
    if cached is not None:
        cost["cached_prompt"] = cached
    if web_search is not None:
        cost[HOSTED_SEARCH] = web_search
    return {
        "model_id": model_id,
        "owned_by": owner,
        "supported_features": ["chat_completions", "responses"]
        + (["reasoning"] if efforts else []),
        "input_modality": inputs
        or {"text": True, "image": True, "audio": False, "video": False, "file": False},
        "output_modality": {"text": True, "image": False},
        "cost": cost,
        "options": {"reasoning_efforts": efforts or []},
        "rows": rows,
    }


MODELS = [
    # Embeddings: the spec's rate table (USD per 1M tokens == micro-credits per token).
    _embedding(
        "text-embedding-3-small",
        "direct",
        0.02,
        dims=1536,
        accepts_dimensions=True,
        rows=[
            ("direct", "text-embedding-3-small", True),
            ("aggregator", "openai/text-embedding-3-small", True),
        ],
    ),
    _embedding(
        "text-embedding-3-large",
        "direct",
        0.13,
        dims=3072,
        accepts_dimensions=True,
        rows=[
            ("direct", "text-embedding-3-large", True),
            ("aggregator", "openai/text-embedding-3-large", True),
        ],
    ),
    _embedding(
        "text-embedding-ada-002",
        "direct",
        0.10,
        dims=1536,
        accepts_dimensions=False,
        rows=[
            ("direct", "text-embedding-ada-002", True),
            ("aggregator", "openai/text-embedding-ada-002", True),
        ],
    ),
    # Native embeddings endpoints.
    _embedding(
        "amazon.titan-embed-text-v2:0",
        "cloud",
        0.02,
        dims=1024,
        accepts_dimensions=True,
        native="bedrock_embeddings",
        rows=[("cloud", "amazon.titan-embed-text-v2:0", True)],
    ),
    _embedding(
        "cohere.embed-english-v3",
        "cloud",
        0.10,
        dims=1024,
        accepts_dimensions=False,
        native="bedrock_embeddings",
        rows=[("cloud", "cohere.embed-english-v3", True)],
    ),
    _embedding(
        "cohere.embed-multilingual-v3",
        "cloud",
        0.10,
        dims=1024,
        accepts_dimensions=False,
        native="bedrock_embeddings",
        rows=[("cloud", "cohere.embed-multilingual-v3", True)],
    ),
    _embedding(
        "gemini-embedding-001",
        "multimodal",
        0.15,
        dims=3072,
        accepts_dimensions=True,
        native="gemini_embeddings",
        rows=[("multimodal", "gemini-embedding-001", True)],
    ),
    # Images: direct.
    _image(
        "gpt-image-1",
        "direct",
        {
            "type": "per_token",
            "prompt": 5,
            "completion": 40,
            # OpenAI's per-image list prices, for answers that carry no token counts.
            "without_tokens": {
                "type": "per_image_by_size_quality",
                "scale": "megapixels",
                "qualities": {
                    "low": {"1024x1024": 11000, "1024x1536": 16000, "1536x1024": 16000},
                    "medium": {"1024x1024": 42000, "1024x1536": 63000, "1536x1024": 63000},
                    "high": {"1024x1024": 167000, "1024x1536": 250000, "1536x1024": 250000},
                },
            },
        },
        watermark="c2pa",
        family="gpt-image",
        max_n=1,
        rows=[("direct", "gpt-image-1", True)],
    ),
    _image(
        "dall-e-3",
        "direct",
        {
            "type": "per_image_by_size_quality",
            "qualities": {
                "standard": {"1024x1024": 40000, "1024x1792": 80000, "1792x1024": 80000},
                "hd": {"1024x1024": 80000, "1024x1792": 120000, "1792x1024": 120000},
            },
        },
        watermark="none",
        family="dall-e",
        max_n=1,
        rows=[("direct", "dall-e-3", False)],
    ),
    _image(
        "dall-e-2",
        "direct",
        {
            "type": "per_image_by_size",
            "sizes": {"256x256": 16000, "512x512": 18000, "1024x1024": 20000},
        },
        watermark="none",
        family="dall-e",
        max_n=10,
        rows=[("direct", "dall-e-2", False)],
    ),
    # Images: cloud (rows inactive until an operator enables them).
    _image(
        "amazon.titan-image-generator-v2:0",
        "cloud",
        {
            "type": "per_image_by_size_quality",
            "qualities": {
                "standard": {"512x512": 8000, "1024x1024": 10000},
                "premium": {"512x512": 10000, "1024x1024": 14000},
            },
        },
        watermark="provenance",
        family="titan",
        max_n=5,
        rows=[("cloud", "amazon.titan-image-generator-v2:0", False)],
    ),
    _image(
        "amazon.nova-canvas-v1:0",
        "cloud",
        {
            "type": "per_image_by_size_quality",
            "qualities": {
                "standard": {"1024x1024": 40000, "2048x2048": 60000},
                "premium": {"1024x1024": 60000, "2048x2048": 80000},
            },
        },
        watermark="provenance",
        family="nova",
        max_n=5,
        rows=[("cloud", "amazon.nova-canvas-v1:0", False)],
    ),
    _image(
        "stability.stable-image-core-v1:1",
        "cloud",
        {"type": "per_image", "image": 30000},
        watermark="none",
        family="stability",
        max_n=1,
        region="us-west-2",
        rows=[("cloud", "stability.stable-image-core-v1:1", False)],
    ),
    _image(
        "stability.stable-image-ultra-v1:1",
        "cloud",
        {"type": "per_image", "image": 80000},
        watermark="none",
        family="stability",
        max_n=1,
        region="us-west-2",
        rows=[("cloud", "stability.stable-image-ultra-v1:1", False)],
    ),
    _image(
        "stability.sd3-5-large-v1:0",
        "cloud",
        {"type": "per_image", "image": 65000},
        watermark="none",
        family="stability",
        max_n=1,
        region="us-west-2",
        rows=[("cloud", "stability.sd3-5-large-v1:0", False)],
    ),
    # Images: multimodal (rows inactive until an operator enables them).
    _image(
        "imagen-4.0-fast-generate-001",
        "multimodal",
        {"type": "per_image", "image": 20000},
        watermark="synthid",
        family="imagen",
        max_n=4,
        rows=[("multimodal", "imagen-4.0-fast-generate-001", False)],
    ),
    _image(
        "imagen-4.0-generate-001",
        "multimodal",
        {"type": "per_image", "image": 40000},
        watermark="synthid",
        family="imagen",
        max_n=4,
        rows=[("multimodal", "imagen-4.0-generate-001", False)],
    ),
    _image(
        "imagen-4.0-ultra-generate-001",
        "multimodal",
        {"type": "per_image", "image": 60000},
        watermark="synthid",
        family="imagen",
        max_n=4,
        rows=[("multimodal", "imagen-4.0-ultra-generate-001", False)],
    ),
    _image(
        "gemini-2.5-flash-image",
        "multimodal",
        {
            "type": "per_token",
            "prompt": 0.3,
            "completion": 30,
            # 1,290 output tokens per 1024x1024 image at the list rate: for answers without counts.
            "without_tokens": {
                "type": "per_image_by_size_quality",
                "scale": "megapixels",
                "qualities": {"standard": {"1024x1024": 38700}},
            },
        },
        watermark="synthid",
        family="flash-image",
        max_n=1,
        rows=[("multimodal", "gemini-2.5-flash-image", False)],
    ),
    # Chat: one or more per chat provider. `web_search`: OpenAI's fee per call of the hosted
    # web_search tool, $10 per 1,000 calls (10,000 micro-credits), its search content billed
    # as input tokens (in the answer's usage); gpt-4o-mini's content is a fixed block of 8,000
    # input tokens a call that the usage does not count, so its fee carries it (+1,200).
    _chat(
        "gpt-4o-mini",
        "direct",
        prompt=0.15,
        completion=0.6,
        cached=0.075,
        web_search=11200,
        rows=[("direct", "gpt-4o-mini", True), ("aggregator", "openai/gpt-4o-mini", True)],
    ),
    _chat(
        "gpt-4.1",
        "direct",
        prompt=2.0,
        completion=8.0,
        cached=0.5,
        web_search=10000,
        rows=[("direct", "gpt-4.1", True), ("aggregator", "openai/gpt-4.1", True)],
    ),
    _chat(
        "o4-mini",
        "direct",
        prompt=1.1,
        completion=4.4,
        cached=0.275,
        efforts=["low", "medium", "high"],
        web_search=10000,
        rows=[("direct", "o4-mini", True), ("aggregator", "openai/o4-mini", True)],
    ),
    _chat(
        "gpt-4o-audio-preview",
        "direct",
        prompt=2.5,
        completion=10.0,
        inputs={"text": True, "image": False, "audio": True, "video": False, "file": False},
        rows=[("direct", "gpt-4o-audio-preview", True)],
    ),
    _chat(
        "meta-llama/llama-3.1-8b-instruct",
        "aggregator",
        prompt=0.13,
        completion=0.4,
        inputs={"text": True, "image": False, "audio": False, "video": False, "file": False},
        rows=[("aggregator", "meta-llama/llama-3.1-8b-instruct", True)],
    ),
]


def _service(model_id, owner, cost, feature):
    """Search and fetch are services, not models: a hidden catalog entry (never listed by
    GET /v1/models) carries the per-call price and the provider rows that serve it."""
    return {
        "model_id": model_id,
        "owned_by": owner,
        "supported_features": [feature],
        "input_modality": {"text": True},
        "output_modality": {"text": True},
        "cost": cost,
        "options": {},
        "listed": False,
        "rows": [(owner, model_id, True)],
    }


# Services: list prices (5 USD per 1,000 web searches, 1 USD per 1,000 fetched pages; academic
# search is free unless an operator sets a price).
SERVICE_ENTRIES = {"web": "web-search", "academic": "academic-search", "fetch": "web-fetch"}
MODELS += [
    _service("web-search", "websearch", {"type": "per_call", "call": 5000}, "web_search"),
    _service("academic-search", "academic", {"type": "per_call", "call": 0}, "web_search"),
    _service("web-fetch", "fetch", {"type": "per_page", "page": 1000}, "web_fetch"),
]


# --- Chat on the providers with protocols of their own (issue 34) ----------------------------
# Rows inactive until an operator has a connection with credentials and enables them
# (`configure_connection SLUG ... --enable-models`, or the admin). One block per provider.

# Claude: on `anthropic`, and on `cloud` (Bedrock) under the same model id. List prices (USD
# per 1M tokens): input, output, cache reads (`cached`) and cache writes (5-minute cache, 1.25x
# input: `cache_write_prompt`). `max_output_tokens` is the max_tokens sent when the request sets
# none (the Messages API requires one). The `cloud` rows use Bedrock's `eu.` cross-region
# inference profiles: the `cloud` connection's region must be an EU one (eu-central-1, ...).
CLAUDE_MAX_OUTPUT_TOKENS = 64000


def _claude(model_id, *, upstream, bedrock, prompt, completion, cached, cache_write):
    entry = _chat(
        model_id,
        "anthropic",
        prompt=prompt,
        completion=completion,
        cached=cached,
        efforts=["low", "medium", "high"],
        inputs={"text": True, "image": True, "audio": False, "video": False, "file": False},
        rows=[("anthropic", upstream, False), ("cloud", bedrock, False)],
    )
    entry["cost"]["cache_write_prompt"] = cache_write
    entry["options"]["max_output_tokens"] = CLAUDE_MAX_OUTPUT_TOKENS
    return entry


ANTHROPIC_MODELS: list[dict] = [
    # Not claude-sonnet-4-5: its end of life at Anthropic is 2026-11-30 (the pinned SDK's
    # deprecation list). Models that think adaptively only (Sonnet 4.6, the 5 family) are added
    # with `add_model` and the `claude_thinking: adaptive` option (docs/providers.md).
    _claude(
        "claude-opus-4-5",
        upstream="claude-opus-4-5-20251101",
        bedrock="eu.anthropic.claude-opus-4-5-20251101-v1:0",
        prompt=5.0,
        completion=25.0,
        cached=0.50,
        cache_write=6.25,
    ),
    _claude(
        "claude-haiku-4-5",
        upstream="claude-haiku-4-5-20251001",
        bedrock="eu.anthropic.claude-haiku-4-5-20251001-v1:0",
        prompt=1.0,
        completion=5.0,
        cached=0.10,
        cache_write=1.25,
    ),
]
# Bedrock Converse: Llama, Mistral and Nova on `cloud` (Claude is in ANTHROPIC_MODELS). List
# prices of us-east-1 on-demand (the source region prices a cross-region call); Llama 3.3 and
# Pixtral Large take on-demand calls only through the `us.` inference profiles (EU accounts:
# `eu.` profiles, as the upstream id of the row).
_TEXT_ONLY = {"text": True, "image": False, "audio": False, "video": False, "file": False}
_DOCUMENTS = {"text": True, "image": True, "audio": False, "video": False, "file": True}
BEDROCK_CHAT_MODELS: list[dict] = [
    _chat(
        "llama-3.3-70b-instruct",
        "cloud",
        prompt=0.72,
        completion=0.72,
        inputs=_TEXT_ONLY,
        rows=[("cloud", "us.meta.llama3-3-70b-instruct-v1:0", False)],
    ),
    _chat(
        "pixtral-large-2502",
        "cloud",
        prompt=2.0,
        completion=6.0,
        rows=[("cloud", "us.mistral.pixtral-large-2502-v1:0", False)],
    ),
    _chat(
        "nova-pro",
        "cloud",
        prompt=0.80,
        completion=3.20,
        cached=0.20,
        inputs=_DOCUMENTS,
        rows=[("cloud", "amazon.nova-pro-v1:0", False)],
    ),
]
# Nova bills no premium for cache writes: a cache point after every system prompt.
BEDROCK_CHAT_MODELS[-1]["options"]["prompt_cache"] = True
# Gemini chat on `multimodal` (list prices for prompts up to 200k tokens; reasoning effort is
# Gemini 2.5's thinking budget: Flash can turn thinking off, Pro cannot).
GEMINI_CHAT_MODELS: list[dict] = [
    _chat(
        "gemini-2.5-flash",
        "multimodal",
        prompt=0.3,
        completion=2.5,
        cached=0.03,
        efforts=["none", "low", "medium", "high"],
        rows=[("multimodal", "gemini-2.5-flash", False)],
    ),
    _chat(
        "gemini-2.5-pro",
        "multimodal",
        prompt=1.25,
        completion=10.0,
        cached=0.125,
        efforts=["low", "medium", "high"],
        rows=[("multimodal", "gemini-2.5-pro", False)],
    ),
]
# Mistral's API (`mistral`, openai_compatible); the OpenAI models' `azure` rows are added to their
# entries above by AZURE_ROWS.
# Mistral's list prices (USD per 1M tokens) when written: the `-latest` aliases move to newer
# models (Large 3, Small 3.2), and Mistral publishes no cached-input price. Both take images.
MISTRAL_MODELS: list[dict] = [
    _chat(
        "mistral-large-latest",
        "mistral",
        prompt=0.5,
        completion=1.5,
        rows=[("mistral", "mistral-large-latest", False)],
    ),
    _chat(
        "mistral-small-latest",
        "mistral",
        prompt=0.1,
        completion=0.3,
        rows=[("mistral", "mistral-small-latest", False)],
    ),
]
# model id -> the upstream id on `azure`: the deployment name, by default the model's own (what
# Azure's portal proposes); `configure_connection azure --deployment-map MODEL=DEPLOYMENT` names
# another. Azure's Global Standard list prices for these equal OpenAI's, so the models' prices
# serve both (Data Zone deployments cost Azure 10% more: docs/decisions/providers.md).
AZURE_ROWS: dict[str, str] = {
    model: model
    for model in (
        "gpt-4o-mini",
        "gpt-4.1",
        "o4-mini",
        "text-embedding-3-small",
        "text-embedding-3-large",
        "text-embedding-ada-002",
    )
}

MODELS += ANTHROPIC_MODELS + BEDROCK_CHAT_MODELS + GEMINI_CHAT_MODELS + MISTRAL_MODELS
for _entry in MODELS:
    if _entry["model_id"] in AZURE_ROWS:
        _entry["rows"].append(("azure", AZURE_ROWS[_entry["model_id"]], False))

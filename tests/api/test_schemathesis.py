"""Property-based run over /v1/openapi.json (schemathesis): whatever a client sends, the gateway
answers with a status and a body its OpenAPI document declares, and never a 5xx of its own.

The live gateway runs with the default catalog, a valid API key and the fake upstreams; the
examples are bounded and derandomized so that CI is stable and takes a few minutes at most.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = int(os.environ.get("GATEWAY_SCHEMATHESIS_EXAMPLES", "25"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# Random model ids are unknown to the catalog (the provider answers 404): half the bodies get a
# model the catalog serves, so the success paths (and billing) are exercised too.
KNOWN_MODELS = {
    "/v1/chat/completions": ["gpt-4o-mini", "o4-mini", "meta-llama/llama-3.1-8b-instruct"],
    "/v1/responses": ["gpt-4o-mini", "o4-mini"],
    "/v1/embeddings": ["text-embedding-3-small", "text-embedding-ada-002"],
    "/v1/images/generations": ["gpt-image-1"],
    "/v1/gemini/embeddings": ["gemini-embedding-001"],
}
BEDROCK_MODELS = {
    "amazon.titan-": "amazon.titan-embed-text-v2:0",
    "cohere.": "cohere.embed-english-v3",
}


# Metadata objects with hostile scalars (NUL, lone surrogates, huge integers, infinities).
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["\x00", "\ud800", "a\udfffb"]),
)
METADATA = st.dictionaries(st.text(max_size=10), SCALARS, max_size=4)


def _known_models(path: str, body) -> list:
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return []
    if path == "/v1/bedrock/embeddings":
        models = [m for p, m in BEDROCK_MODELS.items() if body["model"].startswith(p)]
    else:
        models = KNOWN_MODELS.get(path, [])
    return [{**body, "model": model} for model in models]


@pytest.fixture
def api_schema(gateway, all_upstreams, license):
    # The first request for the document builds it (~5 s of CPU): more than httpx's default
    # 5 s timeout on a loaded machine, when no earlier test of the process asked for it.
    document = httpx.get(gateway.url + "/v1/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=gateway.url)
    schema.config.generation.modes = list(GenerationMode)  # valid and invalid requests

    @schema.hook
    def flatmap_headers(context, headers):
        if not headers:
            return st.just(headers)
        # A random provider pin mostly answers 400: half the requests go without one.
        unpinned = {k: v for k, v in headers.items() if k != "X-Service-Provider"}
        variants = st.sampled_from([headers, unpinned])
        if "X-Service-Metadata" not in headers:
            return variants
        return (
            st.tuples(variants, METADATA).map(
                lambda pair: {**pair[0], "X-Service-Metadata": json.dumps(pair[1])}
            )
            | variants
        )

    @schema.hook
    def flatmap_path_parameters(context, path_parameters):
        # GET /v1/models/{model}: random ids are 404; half the cases ask for served models.
        if not path_parameters or "model" not in path_parameters:
            return st.just(path_parameters)
        known = [{"model": m} for m in ("gpt-4o-mini", "meta-llama/llama-3.1-8b-instruct")]
        return st.sampled_from([path_parameters, *known])

    @schema.hook
    def flatmap_body(context, body):
        variants = _known_models(context.operation.path, body)
        return st.sampled_from([body, *variants]) if variants else st.just(body)

    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_openapi_contract(case, auth, keep_alive_http):
    response = case.call(headers=auth, timeout=30, session=keep_alive_http)
    case.validate_response(response, checks=CHECKS)

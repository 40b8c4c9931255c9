"""Hostile client input: never a 500, never a provider call that cannot be recorded.

Each refusal is checked for its status and body, for the fake upstream having received nothing,
and for the ledger and the wallet being untouched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import httpx
import jwt
import pytest

from core.jsonio import MAX_DEPTH, dumps
from gateway_site.bodylimit import BodyLimit
from licensing.models import Institution, JwtIssuer, Transaction, Wallet
from tests.kit import wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)

MINI = "gpt-4o-mini"
HELLO = [{"role": "user", "content": "hello"}]
LIMIT = 10_000_000
INVALID_JSON = "X-Service-Metadata must be a valid JSON object"

# One valid body per endpoint (their upstream is connected by `all_upstreams`).
BODIES = {
    "/v1/chat/completions": {"model": MINI, "messages": HELLO},
    "/v1/responses": {"model": MINI, "input": "hello"},
    "/v1/embeddings": {"model": "text-embedding-3-small", "input": "hello"},
    "/v1/images/generations": {"model": "gpt-image-1", "prompt": "a fox"},
    "/v1/gemini/embeddings": {"model": "gemini-embedding-001", "input": "hello"},
    "/v1/bedrock/embeddings": {"model": "amazon.titan-embed-text-v2:0", "inputText": "hello"},
}


@pytest.fixture
def limited(make_license, make_key):
    license = make_license(name="hostile", limit=LIMIT)
    return {"Authorization": f"Bearer {make_key(license)}"}


def post(client, headers, path, body=None, content=None, **extra):
    if content is None:
        content = json.dumps(body)
    return client.post(
        path,
        content=content,
        headers={**headers, "Content-Type": "application/json", **extra},
    )


def upstream_calls(fakes) -> int:
    return sum(len(fake.requests) for fake in fakes.values())


def assert_nothing_recorded(fakes):
    assert upstream_calls(fakes) == 0
    assert Transaction.objects.count() == 0
    assert sum(Wallet.objects.values_list("spent", flat=True)) == 0


def detail(response, status=422) -> list[dict]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == body["detail"][0]["type"]  # the SDKs' view of the first item
    return body["detail"]


def wait_for_rows(count: int, timeout: float = 5.0) -> None:
    wait_for_ledger(count, timeout)
    assert Transaction.objects.count() == count


# --- X-Service-Metadata -----------------------------------------------------------------------

NESTED = "X-Service-Metadata value for 'a' must be a scalar; nested objects/arrays are not allowed"
BAD_STRING = "X-Service-Metadata value for 'a' must not contain NUL characters or lone surrogates"
BAD_INT = (
    "X-Service-Metadata value for 'a' must be an integer between -9223372036854775808 and "
    "9223372036854775807"
)
BAD_KEY = (
    "X-Service-Metadata keys must be at most 256 characters, without NUL characters or lone "
    "surrogates"
)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ('{"a":"\\u0000"}', BAD_STRING),
        ('{"a":"x\\u0000y"}', BAD_STRING),
        ('{"a":"\\ud800"}', BAD_STRING),
        ('{"a":"\\udc00x"}', BAD_STRING),
        ('{"a":1e400}', INVALID_JSON),
        ('{"a":-1e400}', INVALID_JSON),
        ('{"a":NaN}', INVALID_JSON),
        ('{"a":9223372036854775808}', BAD_INT),
        ('{"a":-9223372036854775809}', BAD_INT),
        ('{"a":' + "9" * 5000 + "}", INVALID_JSON),
        ('{"a":[1]}', NESTED),
        ('{"\\u0000":1}', BAD_KEY),
        ('{"\\ud800":1}', BAD_KEY),
        ('{"' + "k" * 257 + '":1}', BAD_KEY),
        ("[1]", "X-Service-Metadata must be a JSON object"),
        ("{" * 2000, INVALID_JSON),
        ('{"a":' + "[" * 1900 + "]" * 1900 + "}", INVALID_JSON),  # deeper than Python recurses
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_metadata_that_cannot_be_stored_is_refused_before_the_provider(
    client, limited, catalog, header, message, stream
):
    body = {**BODIES["/v1/chat/completions"], "stream": stream}
    response = post(client, limited, "/v1/chat/completions", body, **{"X-Service-Metadata": header})
    assert response.status_code == 400, response.text
    assert response.json() == {"error": {"message": message}}
    assert_nothing_recorded(catalog)


def test_metadata_at_the_limits_is_stored_exactly(client, limited, catalog):
    metadata = {
        "min": -(2**63),
        "max": 2**63 - 1,
        "float": 1.5e308,
        "text": "caf\u00e9 \U0001f600 \t",
        "k" * 256: None,
        "flag": True,
    }
    header = json.dumps(metadata)  # ASCII escapes, the emoji as a surrogate pair
    response = post(
        client,
        limited,
        "/v1/embeddings",
        BODIES["/v1/embeddings"],
        **{"X-Service-Metadata": header},
    )
    assert response.status_code == 200, response.text
    row = Transaction.objects.get()
    stored = dict(row.metadata)
    # jsonb keeps numbers as numerics: 1.5e308 comes back as the same value written out.
    assert float(stored.pop("float")) == metadata.pop("float")
    assert stored == metadata
    assert Wallet.objects.get().spent == row.credits > 0


# --- strings that reach the ledger ------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(BODIES))
def test_model_too_long_or_with_nul_is_422_on_every_endpoint(client, limited, all_upstreams, path):
    model = BODIES[path]["model"]  # kept as a prefix: bedrock picks the body family by it
    long_model = model + "m" * (201 - len(model))
    items = detail(post(client, limited, path, {**BODIES[path], "model": long_model}))
    assert any(
        item["type"] == "string_too_long" and item["loc"][-1] == "model" for item in items
    ), items
    items = detail(post(client, limited, path, {**BODIES[path], "model": model + "\u0000"}))
    assert any(
        item["type"] == "value_error"
        and item["loc"][-1] == "model"
        and item["msg"] == "Value error, must not contain NUL characters"
        and item["input"] == model + "\u0000"
        for item in items
    ), items
    assert_nothing_recorded(all_upstreams)


def test_model_of_200_characters_reaches_the_provider_and_the_ledger(client, limited, catalog):
    model = "x" * 200
    response = post(client, limited, "/v1/embeddings", {**BODIES["/v1/embeddings"], "model": model})
    assert response.status_code == 404  # the provider decides about unknown models
    assert catalog["direct"].last.json["model"] == model
    assert Transaction.objects.get().requested_model == model


# --- integers the providers cannot take ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field", "value", "kind", "bound"),
    [
        ("/v1/chat/completions", "max_tokens", 2**64, "less_than_equal", 2**63 - 1),
        ("/v1/chat/completions", "max_completion_tokens", 2**63, "less_than_equal", 2**63 - 1),
        ("/v1/chat/completions", "seed", 2**64, "less_than_equal", 2**63 - 1),
        ("/v1/chat/completions", "seed", -(2**64), "greater_than_equal", -(2**63)),
        ("/v1/chat/completions", "n", 10**40, "less_than_equal", 128),
        ("/v1/chat/completions", "top_logprobs", 2**64, "less_than_equal", 20),
        ("/v1/responses", "max_output_tokens", 2**64, "less_than_equal", 2**63 - 1),
        ("/v1/embeddings", "dimensions", 2**64, "less_than_equal", 2**63 - 1),
        ("/v1/images/generations", "n", 2**64, "less_than_equal", 10),
        ("/v1/images/generations", "seed", 2**64, "less_than_equal", 4294967295),
        ("/v1/images/generations", "output_compression", 2**64, "less_than_equal", 100),
        ("/v1/gemini/embeddings", "output_dimensionality", 2**64, "less_than_equal", 2**63 - 1),
    ],
)
def test_out_of_range_integers_are_422_and_echoed_exactly(
    client, limited, all_upstreams, path, field, value, kind, bound
):
    response = post(client, limited, path, {**BODIES[path], field: value})
    items = detail(response)
    assert items == [
        {
            "type": kind,
            "loc": ["body", field],
            "msg": items[0]["msg"],
            "input": value,
            "ctx": {"le" if kind == "less_than_equal" else "ge": bound},
        }
    ]
    assert f'"input":{value},' in response.text  # an exact JSON number, not a float or string
    assert_nothing_recorded(all_upstreams)


def test_big_integer_inside_free_form_json_is_422(client, limited, catalog):
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "maximum": 2**64}},
    }
    body = {**BODIES["/v1/chat/completions"], "tools": [tool]}
    items = detail(post(client, limited, "/v1/chat/completions", body))
    assert any(
        i["type"] == "value_error"
        and i["loc"][-1] == "parameters"
        and i["msg"].startswith("Value error, integers must be between")
        for i in items
    ), items
    assert_nothing_recorded(catalog)


def test_422_echoes_big_integers_nested_in_the_input(client, limited, catalog):
    body = {**BODIES["/v1/embeddings"], "input": [[2**70, -(2**80)]]}
    response = post(client, limited, "/v1/embeddings", body)
    items = detail(response)
    assert any(item["input"] == [2**70, -(2**80)] for item in items), items
    assert_nothing_recorded(catalog)


# --- bodies the parser refuses ------------------------------------------------------------------


def test_ten_thousand_deep_body_is_json_invalid(client, limited, catalog):
    items = detail(post(client, limited, "/v1/embeddings", content="[" * 10_000 + "]" * 10_000))
    assert items[0]["type"] == "json_invalid"
    assert items[0]["loc"] == ["body", MAX_DEPTH]
    assert_nothing_recorded(catalog)


def test_deep_value_inside_a_valid_body_is_json_invalid_at_its_offset(client, limited, catalog):
    prefix = '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "x": '
    content = prefix + "[" * 100 + "]" * 100 + "}"
    items = detail(post(client, limited, "/v1/chat/completions", content=content))
    assert items[0]["type"] == "json_invalid"
    assert items[0]["loc"] == ["body", len(prefix) + MAX_DEPTH - 1]
    assert_nothing_recorded(catalog)


def test_body_at_the_depth_limit_is_validated_normally(client, limited, catalog):
    content = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    items = detail(post(client, limited, "/v1/embeddings", content=content))
    assert items[0]["type"] != "json_invalid"


@pytest.mark.parametrize(
    ("value", "message"),
    [("9" * 5000, "Number too large"), ("1e400", "Number out of range"), ("-1.5e999", None)],
)
def test_unrepresentable_numbers_are_json_invalid(client, limited, catalog, value, message):
    prefix = '{"model": "text-embedding-3-small", "input": "hi", "dimensions": '
    items = detail(post(client, limited, "/v1/embeddings", content=prefix + value + "}"))
    assert items[0]["type"] == "json_invalid"
    assert items[0]["loc"] == ["body", len(prefix)]
    if message:
        assert items[0]["ctx"] == {"error": message}
    assert_nothing_recorded(catalog)


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDFFF", "\\udc00\\ud800", "a\\ud83d"])
def test_lone_surrogates_are_json_invalid_at_their_offset(client, limited, catalog, escape):
    prefix = '{"model": "text-embedding-3-small", "input": "ok '
    content = prefix + escape + '"}'
    items = detail(post(client, limited, "/v1/embeddings", content=content))
    assert items[0]["type"] == "json_invalid"
    assert items[0]["ctx"] == {"error": "Lone surrogate in string"}
    assert items[0]["loc"][1] in range(len(prefix), len(prefix) + len(escape))
    assert_nothing_recorded(catalog)


def test_surrogate_pairs_and_escaped_backslashes_are_fine(client, limited, catalog):
    content = '{"model": "text-embedding-3-small", "input": "\\ud83d\\ude00 \\\\ud800"}'
    response = post(client, limited, "/v1/embeddings", content=content)
    assert response.status_code == 200, response.text
    assert catalog["direct"].last.json["input"] == "\U0001f600 \\ud800"


def test_renderer_echoes_what_orjson_refuses():
    rendered = dumps({"detail": [{"input": ["\ud800x", 2**70, {"\udfff": -(2**90)}]}]})
    assert json.loads(rendered) == {"detail": [{"input": ["\ufffdx", 2**70, {"\ufffd": -(2**90)}]}]}


# --- optional fields that code dereferences ---------------------------------------------------


def test_stream_options_null_on_a_stream(client, limited, catalog):
    body = {**BODIES["/v1/chat/completions"], "stream": True, "stream_options": None}
    response = post(client, limited, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.text.endswith("data: [DONE]\n\n")
    assert catalog["direct"].last.json["stream_options"] == {"include_usage": True}
    wait_for_rows(1)
    row = Transaction.objects.get()
    assert row.status_code == 200 and row.credits > 0
    assert Wallet.objects.get().spent == row.credits


@pytest.mark.parametrize(
    "extra",
    [
        {"stream": None, "tools": None, "reasoning": None, "response_format": None},
        {"stop": None, "logit_bias": None, "metadata": None, "tool_choice": None},
    ],
)
def test_explicit_nulls_on_chat(client, limited, catalog, extra):
    response = post(
        client, limited, "/v1/chat/completions", {**BODIES["/v1/chat/completions"], **extra}
    )
    assert response.status_code == 200, response.text


def test_explicit_nulls_on_responses(client, limited, catalog):
    body = {
        **BODIES["/v1/responses"],
        "stream": None,
        "tools": None,
        "reasoning": None,
        "text": None,
        "instructions": None,
    }
    response = post(client, limited, "/v1/responses", body)
    assert response.status_code == 200, response.text


# --- forged JWTs ------------------------------------------------------------------------------

ISSUER, AUDIENCE, SECRET = "https://idp.example.edu", "gateway", "s" * 40


@pytest.fixture
def issuer(license):
    return JwtIssuer.objects.create(
        institution=Institution.objects.get(),
        license=license,
        issuer=ISSUER,
        audience=AUDIENCE,
        algorithms=["HS256"],
        hs256_secret=SECRET,
    )


def _claims(**overrides):
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "s-1", "exp": now + 300, **overrides}


@pytest.mark.parametrize(
    "claims",
    [
        {"iss": "a\u0000b"},
        {"iss": "\ud800"},
        {"iss": "i" * 501},
        {"iss": ["list"]},
        {"sub": "a\u0000b"},
        {"sub": "\udfff"},
        {"aud": "a\u0000b"},
    ],
)
@pytest.mark.parametrize("signed", [False, True])
def test_jwt_with_claims_no_database_takes_is_401(client, issuer, caplog, claims, signed):
    payload = json.dumps(_claims(**claims)).encode()  # pyjwt itself refuses lone surrogates
    if signed:
        token = jwt.api_jws.encode(payload, SECRET, algorithm="HS256")
    else:
        token = jwt.api_jws.encode(payload, None, algorithm="none")
    with caplog.at_level(logging.ERROR):
        response = client.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, response.text
    assert response.json() == {"error": {"message": "Invalid API key"}}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- early 413 --------------------------------------------------------------------------------


def _raw_request(gateway, head: bytes, body_chunks, timeout=5.0) -> tuple[bytes, int, float]:
    """Send `head`, then body chunks until the server answers: the answer, the bytes of body
    sent and the seconds it took. A server that stops reading closes the connection; what it
    answered before is kept."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=timeout)
    started = time.monotonic()
    sent = 0
    answer = b""
    try:
        sock.sendall(head)
        for chunk in body_chunks:
            if _readable(sock):
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        while not answer.endswith(b"}"):
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            answer += data
    finally:
        sock.close()
    return answer, sent, time.monotonic() - started


def _readable(sock) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def _head(gateway, auth, extra: str) -> bytes:
    return (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
        f"Authorization: {auth['Authorization']}\r\nContent-Type: application/json\r\n"
        f"{extra}\r\n"
    ).encode()


def test_announced_large_body_is_413_before_it_is_read(gateway, limited, catalog):
    head = _head(gateway, limited, f"Content-Length: {300 * 1024 * 1024}\r\n")
    answer, _, seconds = _raw_request(gateway, head, [b"x" * 65536] * 16)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert answer.endswith(b'{"error":{"message":"Request body is too large"}}')
    assert seconds < 3
    assert_nothing_recorded(catalog)


def test_unauthenticated_large_body_is_413_too(gateway, catalog):
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: {200 * 1024 * 1024}\r\n\r\n"
    ).encode()
    answer, _, seconds = _raw_request(gateway, head, [b"x" * 65536] * 16)
    assert answer.startswith(b"HTTP/1.1 413 ") and seconds < 3


def test_chunked_body_over_the_limit_stops_being_read(gateway, limited, catalog, settings):
    limit = settings.GATEWAY_MAX_BODY_BYTES
    chunk = b"x" * 65536
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    head = _head(gateway, limited, "Transfer-Encoding: chunked\r\n")
    # Just past the limit, then nothing more: the answer must come without the body's end.
    chunks = [framed] * (limit // len(chunk) + 2)
    answer, sent, seconds = _raw_request(gateway, head, chunks)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert answer.endswith(b'{"error":{"message":"Request body is too large"}}')
    assert seconds < 5
    assert_nothing_recorded(catalog)


def _run_asgi(app, path: str, messages: list[dict], headers=()):
    """Drive an ASGI app by hand: what it sent, and how many body messages it read."""
    sent: list[dict] = []
    read = 0

    async def receive():
        nonlocal read
        read += 1
        return messages[read - 1] if read <= len(messages) else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST", "headers": list(headers)}
    asyncio.run(app(scope, receive, send))
    return sent, read


async def _reading_app(scope, receive, send):
    """Reads the whole body like Django's handler, then answers 200."""
    from django.core.exceptions import RequestAborted

    try:
        while True:
            message = await receive()
            if not message.get("more_body"):
                break
    except RequestAborted:
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_body_limit_counts_chunks_and_stops_at_the_limit():
    app = BodyLimit(_reading_app, max_bytes=1000)
    chunks = [{"type": "http.request", "body": b"x" * 300, "more_body": True}] * 10
    sent, read = _run_asgi(app, "/v1/embeddings", chunks)
    assert read == 4  # 1,200 bytes: refused on the chunk that passed the limit
    assert sent[0]["status"] == 413
    assert sent[1]["body"] == b'{"error":{"message":"Request body is too large"}}'


def test_body_limit_leaves_the_admin_and_small_bodies_alone():
    app = BodyLimit(_reading_app, max_bytes=1000)
    chunks = [{"type": "http.request", "body": b"x" * 300, "more_body": True}] * 9
    chunks.append({"type": "http.request", "body": b"x" * 300, "more_body": False})
    sent, read = _run_asgi(app, "/admin/login/", chunks, [(b"content-length", b"3000")])
    assert (sent[0]["status"], read) == (200, 10)
    small = [{"type": "http.request", "body": b"x" * 1000, "more_body": False}]
    sent, _ = _run_asgi(app, "/v1/embeddings", small, [(b"content-length", b"1000")])
    assert sent[0]["status"] == 200
    sent, read = _run_asgi(app, "/v1/embeddings", small, [(b"content-length", b"1001")])
    assert (sent[0]["status"], read) == (413, 0)


# --- the OpenAPI document -----------------------------------------------------------------------


def _schema_classes():
    import importlib
    import pkgutil

    from pydantic import BaseModel

    import inference.endpoints
    import inference.schemas

    classes = []
    for package in (inference.schemas, inference.endpoints):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            classes += [
                value
                for value in vars(module).values()
                if isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
            ]
    return classes


def test_every_openapi_component_names_exactly_one_class(client):
    components = client.get("/v1/openapi.json").json()["components"]["schemas"]
    classes = _schema_classes()
    for name in components:
        owners = [c for c in classes if c.__name__ == name]
        assert len(owners) == 1, (name, owners)


def test_openapi_chat_reasoning_matches_what_the_server_accepts(client, limited, catalog):
    document = client.get("/v1/openapi.json").json()
    components = document["components"]["schemas"]
    chat = components["ChatCompletionRequest"]["properties"]["reasoning"]
    ref = next(s["$ref"] for s in chat["anyOf"] if "$ref" in s).rsplit("/", 1)[-1]
    assert "summary" not in components[ref]["properties"]
    responses = components["ResponseRequest"]["properties"]["reasoning"]
    ref = next(s["$ref"] for s in responses["anyOf"] if "$ref" in s).rsplit("/", 1)[-1]
    assert "summary" in components[ref]["properties"]
    body = {**BODIES["/v1/chat/completions"], "reasoning": {"effort": "low", "summary": "auto"}}
    items = detail(post(client, limited, "/v1/chat/completions", body))
    assert items[0]["type"] == "extra_forbidden"


def test_openapi_documents_413_405_and_event_streams(client):
    paths = client.get("/v1/openapi.json").json()["paths"]
    for path, operations in paths.items():
        if not path.startswith("/v1/") or path.endswith(("openapi.json", "docs")):
            continue
        for operation in operations.values():
            assert {"405", "413"} <= set(operation["responses"]), path
    for path in ("/v1/chat/completions", "/v1/responses"):
        content = paths[path]["post"]["responses"]["200"]["content"]
        assert set(content) == {"application/json", "text/event-stream"}


def test_no_server_error_page_leaks_from_httpx_edge_cases(client, limited, catalog):
    """Odd but well-formed requests are answered within the contract."""
    for content in (b"", b"null", b"[]", b'"x"', b"\xff", b"{}" + b" " * 10):
        response = post(client, limited, "/v1/embeddings", content=content)
        assert response.status_code == 422, (content, response.text)
    assert_nothing_recorded(catalog)


def test_big_integer_echo_survives_an_http_roundtrip(gateway, limited, catalog):
    with httpx.Client(base_url=gateway.url) as http:
        body = {**BODIES["/v1/images/generations"], "n": 2**200}
        response = post(http, limited, "/v1/images/generations", body)
    assert detail(response)[0]["input"] == 2**200

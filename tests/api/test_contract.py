"""The error contract (spec: Errors): 422 and 405 shapes, unknown paths, the plain-text 500,
service headers, X-Request-Id, the access log and the OpenAPI document."""

from __future__ import annotations

import json
import logging

import pytest

from gateway_site.logs import JsonFormatter

pytestmark = pytest.mark.django_db(transaction=True)

EMBEDDINGS = "/v1/embeddings"
IMAGES = "/v1/images/generations"


def post(client, path, body, headers=None, raw=None):
    content = raw if raw is not None else json.dumps(body).encode()
    return client.post(
        path, content=content, headers={"Content-Type": "application/json", **(headers or {})}
    )


def detail(response, status=422):
    """The contract's `detail` items; beside them the `error` object the SDKs show, made from
    the first item."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "error"} and isinstance(body["detail"], list)
    for item in body["detail"]:
        assert {"type", "loc", "msg", "input"} <= set(item), item
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["code"] == body["detail"][0]["type"]
    assert error["message"]
    return body["detail"]


def only(items):
    assert len(items) == 1, items
    return items[0]


# --- 422 on embeddings ------------------------------------------------------------------------


def test_missing_required_fields(client, auth):
    items = detail(post(client, EMBEDDINGS, {}, auth))
    assert [(i["type"], i["loc"], i["msg"]) for i in items] == [
        ("missing", ["body", "model"], "Field required"),
        ("missing", ["body", "input"], "Field required"),
    ]


@pytest.mark.parametrize(
    "field,value",
    [
        ("input_type", "query"),
        ("output_dtype", "float"),
        ("stream", True),
        ("task_type", "RETRIEVAL_QUERY"),
        ("whatever", 1),
    ],
)
def test_undocumented_embeddings_fields(client, auth, field, value):
    body = {"model": "text-embedding-3-small", "input": "hi", field: value}
    item = only(detail(post(client, EMBEDDINGS, body, auth)))
    assert item == {
        "type": "extra_forbidden",
        "loc": ["body", field],
        "msg": "Extra inputs are not permitted",
        "input": value,
    }


@pytest.mark.parametrize(
    "value",
    [[[1, 2, 3]], [1, 2], [{"type": "image_url", "image_url": {"url": "x"}}], 5, [], None],
    ids=["token-arrays", "tokens", "multimodal", "number", "empty-list", "null"],
)
def test_embeddings_input_must_be_text(client, auth, value):
    items = detail(
        post(client, EMBEDDINGS, {"model": "text-embedding-3-small", "input": value}, auth)
    )
    assert items and all(item["loc"][:2] == ["body", "input"] for item in items)


def test_encoding_format_base64_rejected(client, auth):
    body = {"model": "text-embedding-3-small", "input": "hi", "encoding_format": "base64"}
    item = only(detail(post(client, EMBEDDINGS, body, auth)))
    assert item["type"] == "literal_error"
    assert item["loc"] == ["body", "encoding_format"]
    assert item["input"] == "base64"
    assert item["ctx"] == {"expected": "'float'"}


def test_dimensions_range_and_type(client, auth):
    body = {"model": "text-embedding-3-small", "input": "hi", "dimensions": 0}
    item = only(detail(post(client, EMBEDDINGS, body, auth)))
    assert (item["type"], item["loc"], item["ctx"]) == (
        "greater_than_equal",
        ["body", "dimensions"],
        {"ge": 1},
    )
    body["dimensions"] = "256"  # strict: a string is not an integer
    assert only(detail(post(client, EMBEDDINGS, body, auth)))["type"] == "int_type"


def test_empty_model_is_string_too_short(client, auth):
    item = only(detail(post(client, EMBEDDINGS, {"model": "", "input": "x"}, auth)))
    assert (item["type"], item["loc"], item["ctx"]) == (
        "string_too_short",
        ["body", "model"],
        {"min_length": 1},
    )


@pytest.mark.parametrize(
    "raw,offset",
    [
        (b'{"model": "x", "input": ', 24),
        (b"not json", 0),
        (b'{"model": "x"} trailing', 15),
        (b'{"model": "\xc3\xa9\xff"}', 12),  # invalid UTF-8: offset in characters
        (b'{"model": "x", "input": "y", "dimensions": NaN}', 43),
    ],
)
def test_json_invalid_with_character_offset(client, auth, raw, offset):
    item = only(detail(post(client, EMBEDDINGS, None, auth, raw=raw)))
    assert item["type"] == "json_invalid"
    assert item["loc"] == ["body", offset]


def test_huge_body_is_413(client, auth, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = {"model": "text-embedding-3-small", "input": ["x" * 1000] * 20}
    response = post(client, EMBEDDINGS, body, auth)
    assert response.status_code == 413
    assert response.json() == {"error": {"message": "Request body is too large"}}


def test_body_that_is_not_an_object(client, auth):
    item = only(detail(post(client, EMBEDDINGS, ["model"], auth)))
    assert item["type"] == "model_type" and item["loc"] == ["body"]


def test_empty_body(client, auth):
    item = only(detail(post(client, EMBEDDINGS, None, auth, raw=b"")))
    assert (item["type"], item["loc"], item["msg"]) == ("missing", ["body"], "Field required")


# --- the `error` object beside `detail` (README, Decisions) -------------------------------------


def test_422_body_has_the_error_object_listing_its_problems(client, auth):
    response = post(client, EMBEDDINGS, {}, auth)
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {"type": "missing", "loc": ["body", "model"], "msg": "Field required", "input": {}},
            {"type": "missing", "loc": ["body", "input"], "msg": "Field required", "input": {}},
        ],
        "error": {
            "message": "2 problems: 1) model: Field required; 2) input: Field required",
            "type": "invalid_request_error",
            "param": "model",
            "code": "missing",
        },
    }


def test_422_error_param_is_the_dotted_loc_and_the_message_the_clients_path(client, auth):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi", "x": 1}]}
    response = post(client, "/v1/chat/completions", body, auth)
    items = detail(response)
    assert items[0]["loc"] == ["body", "messages", 0, "user", "x"]
    assert response.json()["error"] == {
        "message": "messages[0].x: Extra inputs are not permitted",
        "type": "invalid_request_error",
        "param": "messages.0.user.x",
        "code": "extra_forbidden",
    }


def test_422_names_no_internal_type_and_lists_every_problem(client, auth):
    """Issue 35: `tools.4.ResponseFunctionTool.type` was all a client saw of a body with several
    problems; now the message counts them and lists each in the client's terms."""
    tools = [{"type": "function", "name": f"f{i}", "parameters": {}} for i in range(4)]
    tools.append({"type": "code_interpreter", "container": {"type": "auto"}})
    tools[1].pop("name")
    body = {"model": "gpt-4o-mini", "input": "hi", "tools": tools, "temperature": 9, "x": 1}
    response = post(client, "/v1/responses", body, auth)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["message"] == (
        "4 problems: 1) temperature: Input should be less than or equal to 2; 2) tools[1].name: "
        "Field required; 3) tools[4]: Input should be a tool of type 'function', 'custom', "
        "'namespace', 'web_search', 'web_search_2025_08_26', 'tool_search' (or a {name, "
        "description, input_schema} object); other built-in tools are not served; 4) x: Extra "
        "inputs are not permitted"
    )
    assert "Response" not in error["message"]
    # The spec's detail is unchanged: pydantic's loc, branch label included.
    assert [item["loc"] for item in detail(response)][1:3] == [
        ["body", "tools", 1, "function", "name"],
        ["body", "tools", 4],
    ]
    assert error["param"] == "temperature" and error["code"] == "less_than_equal"


def test_422_lists_at_most_five_problems_and_counts_the_rest(client, auth):
    body = {"model": "gpt-4o-mini", "input": "hi", **{f"x{i}": i for i in range(8)}}
    response = post(client, "/v1/responses", body, auth)
    message = response.json()["error"]["message"]
    assert message.startswith("8 problems: 1) x0: Extra inputs are not permitted; 2) x1:")
    assert message.endswith(
        "5) x4: Extra inputs are not permitted; and 3 more (all are in `detail`)"
    )
    assert len(detail(response)) == 8


def test_422_images_response_format_says_images_are_base64(client, auth):
    body = {"model": "gpt-image-1", "prompt": "a cat", "response_format": "b64_json"}
    response = post(client, "/v1/images/generations", body, auth)
    assert response.status_code == 422
    assert detail(response) == [
        {
            "type": "extra_forbidden",
            "loc": ["body", "response_format"],
            "msg": "Extra inputs are not permitted",
            "input": "b64_json",
        }
    ]
    assert response.json()["error"]["message"] == (
        "response_format: Extra inputs are not permitted; images always come back as base64 "
        "(`b64_json`), never as a URL: leave `response_format` out of the request"
    )


def test_422_encoding_format_says_what_to_do(client, auth):
    body = {"model": "text-embedding-3-small", "input": "hi", "encoding_format": "base64"}
    response = post(client, EMBEDDINGS, body, auth)
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {
                "type": "literal_error",
                "loc": ["body", "encoding_format"],
                "msg": "Input should be 'float'",
                "input": "base64",
                "ctx": {"expected": "'float'"},
            }
        ],
        "error": {
            "message": "encoding_format: Input should be 'float'; pass "
            'encoding_format="float": embeddings are returned as float arrays only (the openai '
            'SDK sends "base64" unless told)',
            "type": "invalid_request_error",
            "param": "encoding_format",
            "code": "literal_error",
        },
    }


def test_422_json_invalid_names_no_field(client, auth):
    response = post(client, EMBEDDINGS, None, auth, raw=b'{"model": "x", "input": ')
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {
                "type": "json_invalid",
                "loc": ["body", 24],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": "Expecting value"},
            }
        ],
        "error": {
            "message": "JSON decode error at character 24: Expecting value",
            "type": "invalid_request_error",
            "param": None,
            "code": "json_invalid",
        },
    }


def test_422_empty_body_names_the_body(client, auth):
    response = post(client, EMBEDDINGS, None, auth, raw=b"")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "message": "body: Field required",
        "type": "invalid_request_error",
        "param": None,
        "code": "missing",
    }


# --- 422 on image generation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["response_format", "stream", "messages", "dimensions", "image", "mask"]
)
def test_rejected_image_fields(client, auth, field):
    body = {"model": "gpt-image-1", "prompt": "a cat", field: "x"}
    item = only(detail(post(client, IMAGES, body, auth)))
    assert (item["type"], item["loc"], item["msg"]) == (
        "extra_forbidden",
        ["body", field],
        "Extra inputs are not permitted",
    )


@pytest.mark.parametrize(
    "field,value,type_,ctx",
    [
        ("n", 0, "greater_than_equal", {"ge": 1}),
        ("n", 11, "less_than_equal", {"le": 10}),
        ("output_compression", 101, "less_than_equal", {"le": 100}),
        ("output_compression", -1, "greater_than_equal", {"ge": 0}),
        ("quality", "ultra", "literal_error", None),
        ("style", "sketchy", "literal_error", None),
        ("background", "clear", "literal_error", None),
        ("output_format", "gif", "literal_error", None),
        ("moderation", "none", "literal_error", None),
        ("size", "huge", "string_pattern_mismatch", None),
        ("n", "2", "int_type", None),
        ("prompt", "", "string_too_short", {"min_length": 1}),
    ],
)
def test_image_field_rules(client, auth, field, value, type_, ctx):
    body = {"model": "gpt-image-1", "prompt": "a cat", field: value}
    item = only(detail(post(client, IMAGES, body, auth)))
    assert item["type"] == type_ and item["loc"] == ["body", field] and item["input"] == value
    if ctx is not None:
        assert item["ctx"] == ctx


# --- 405 and unknown paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,path,allowed",
    [
        ("GET", EMBEDDINGS, "POST"),
        ("PUT", IMAGES, "POST"),
        ("DELETE", EMBEDDINGS, "POST"),
        ("POST", "/v1/models", "GET"),
        ("POST", "/v1/license", "GET"),
        ("PATCH", "/v1/health", "GET"),
    ],
)
def test_wrong_method_is_405_detail(client, method, path, allowed):
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.json() == {
        "detail": [
            {
                "type": "method_not_allowed",
                "loc": ["request", "method"],
                "msg": "Method Not Allowed",
                "input": method,
                "ctx": {"allowed": [allowed]},
            }
        ],
        "error": {
            "message": f"Method Not Allowed: {method} (allowed: {allowed})",
            "type": "invalid_request_error",
            "param": None,
            "code": "method_not_allowed",
        },
    }
    assert response.headers["Allow"] == allowed


@pytest.mark.parametrize("path", ["/v1/images/edits", "/v1/images/variations", "/v1/nothing"])
def test_unknown_paths_are_json_404(client, auth, path):
    response = post(client, path, {"model": "gpt-image-1", "prompt": "x"}, auth)
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "Not found"}}


# --- unexpected failures ----------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_unexpected_failure_is_plain_text_500(client, auth, monkeypatch, settings, debug):
    from inference.endpoints import info

    settings.DEBUG = debug

    def boom(*args, **kwargs):
        raise RuntimeError("secret internals /home/app/settings.py")

    monkeypatch.setattr(info, "usable_models", boom)
    response = client.get("/v1/models", headers=auth)
    assert response.status_code == 500
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.text == "Internal Server Error"


# --- service headers (check 4) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["", "/", "direct/", "/default", "a/b/c", "direct//x", "direct/ /x"]
)
def test_malformed_provider_header(client, auth, value):
    response = client.get("/v1/models", headers={**auth, "X-Service-Provider": value})
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": f"Malformed X-Service-Provider header: '{value.strip()}'"}
    }


@pytest.mark.parametrize(
    "value,message",
    [
        ("{not json", "X-Service-Metadata must be a valid JSON object"),
        ("", "X-Service-Metadata must be a valid JSON object"),
        ('{"a": NaN}', "X-Service-Metadata must be a valid JSON object"),
        ("[1, 2]", "X-Service-Metadata must be a JSON object"),
        ('"text"', "X-Service-Metadata must be a JSON object"),
        ("42", "X-Service-Metadata must be a JSON object"),
        (
            '{"course": "bio", "tags": ["a"]}',
            "X-Service-Metadata value for 'tags' must be a scalar; "
            "nested objects/arrays are not allowed",
        ),
        (
            '{"x": {"y": 1}}',
            "X-Service-Metadata value for 'x' must be a scalar; "
            "nested objects/arrays are not allowed",
        ),
    ],
)
def test_malformed_metadata_header(client, auth, value, message):
    response = client.get("/v1/license", headers={**auth, "X-Service-Metadata": value})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": message}}


def test_valid_metadata_header(client, auth):
    value = '{"course": "bio-101", "n": 3, "ok": true, "none": null, "name": "Zoë"}'
    response = client.get(
        "/v1/license", headers={**auth, "X-Service-Metadata": value.encode("utf-8")}
    )
    assert response.status_code == 200


# --- request ids, access log, OpenAPI ---------------------------------------------------------


def test_every_response_has_a_request_id(client, auth):
    ids = set()
    for response in (
        client.get("/v1/health"),
        client.get("/v1/models"),
        client.get("/v1/models", headers=auth),
        client.get(EMBEDDINGS),
        client.get("/v1/nothing"),
    ):
        assert len(response.headers["X-Request-Id"]) == 32
        ids.add(response.headers["X-Request-Id"])
    assert len(ids) == 5


def test_one_structured_log_line_without_secrets(client, auth, api_key, caplog):
    logger = logging.getLogger("gateway.access")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            response = client.get("/v1/license", headers=auth)
    finally:
        logger.removeHandler(caplog.handler)
    formatter = JsonFormatter()  # the production format
    lines = [json.loads(formatter.format(r)) for r in caplog.records if r.name == "gateway.access"]
    line = only(lines)
    assert line["request_id"] == response.headers["X-Request-Id"]
    assert (line["method"], line["path"], line["status"], line["license"]) == (
        "GET",
        "/v1/license",
        200,
        "test-license",
    )
    assert line["latency_ms"] >= 0
    assert api_key not in caplog.text


def test_openapi_document(client):
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    paths = doc["paths"]
    assert set(paths["/v1/embeddings"]) == {"post"}
    assert set(paths["/v1/images/generations"]) == {"post"}
    assert set(paths["/v1/models"]) == {"get"}
    assert "/v1/images/edits" not in paths
    schemas = doc["components"]["schemas"]
    assert schemas["EmbeddingsRequest"]["additionalProperties"] is False
    assert set(schemas["EmbeddingsRequest"]["required"]) == {"model", "input"}
    assert schemas["ImageGenerationRequest"]["properties"]["n"]["maximum"] == 10
    assert doc["components"]["securitySchemes"]["BearerAuth"]["scheme"] == "bearer"
    assert "422" in paths["/v1/embeddings"]["post"]["responses"]
    assert client.get("/v1/docs").status_code == 200

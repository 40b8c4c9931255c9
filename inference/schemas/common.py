"""What every request schema shares, and the limits that keep hostile values out.

- `ModelId`: the model field is stored in the ledger (`requested_model`, 200 characters), so
  it is at most 200 characters and has no NUL (422 `string_too_long` / `value_error`).
- Integer fields without a documented range are bounded to int64 (`Int64`): what providers'
  JSON parsers and ours take; beyond it is 422 `less_than_equal` / `greater_than_equal`.
- Free-form JSON objects (tool parameters, JSON schemas) hold only int64 integers (`JSONObject`).
"""

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MODEL_ID_MAX_LENGTH = 200  # licensing.models.Transaction.requested_model


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _int64_only(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not INT64_MIN <= item <= INT64_MAX:
                raise ValueError(f"integers must be between {INT64_MIN} and {INT64_MAX}")
    return value


ModelId = Annotated[
    str, Field(min_length=1, max_length=MODEL_ID_MAX_LENGTH), AfterValidator(_no_nul)
]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
PositiveInt64 = Annotated[int, Field(ge=1, le=INT64_MAX)]
JSONObject = Annotated[dict[str, Any], AfterValidator(_int64_only)]


class StrictBody(BaseModel):
    """Request bodies: undocumented fields are 422 `extra_forbidden`, never ignored, and values
    are not coerced across JSON types ("5" is not an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorMessage(BaseModel):
    message: str


class ErrorBody(BaseModel):
    error: ErrorMessage


class PolicyErrorMessage(BaseModel):
    message: str
    code: str
    param: str | None


class PolicyErrorBody(BaseModel):
    error: PolicyErrorMessage


class ValidationItem(BaseModel):
    type: str
    loc: list[str | int]
    msg: str
    input: object = None
    ctx: dict | None = None


class ValidationErrorMessage(BaseModel):
    """The first item of `detail`, as the OpenAI SDKs read an error (core.errors)."""

    message: str
    type: str
    param: str | None
    code: str


class ValidationBody(BaseModel):
    detail: list[ValidationItem]
    error: ValidationErrorMessage


# Every /v1 operation may answer these: a wrong method, a body over GATEWAY_MAX_BODY_BYTES.
ALWAYS = (405, 413)


def error_responses(*statuses: int) -> dict:
    """The documented error bodies of an operation, for the OpenAPI document."""
    shapes = {403: PolicyErrorBody, 405: ValidationBody, 422: ValidationBody}
    return {status: shapes.get(status, ErrorBody) for status in sorted({*statuses, *ALWAYS})}


# The optional headers of every provider-backed operation (spec: request headers).
SERVICE_HEADERS = {
    "parameters": [
        {
            "name": "X-Service-Provider",
            "in": "header",
            "required": False,
            "schema": {"type": "string"},
            "description": "A provider slug or `<provider>/<connection>`; only narrows the "
            "providers the license allows",
        },
        {
            "name": "X-Service-Metadata",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": 4096},
            "description": "A JSON object of scalars, stored with the ledger row",
        },
    ]
}

# Chat completions and responses answer `stream: true` with server-sent events.
SSE_RESPONSE = {
    **SERVICE_HEADERS,
    "responses": {
        200: {
            "content": {
                "text/event-stream": {
                    "schema": {
                        "description": "One server-sent event; `data` holds a JSON chunk "
                        "(chat completions: ending with `[DONE]`)",
                        "type": "object",
                        "properties": {
                            "event": {"type": "string"},
                            "data": {"type": "string"},
                            "id": {"type": "string"},
                            "retry": {"type": "integer"},
                        },
                        "required": ["data"],
                    }
                }
            }
        }
    },
}

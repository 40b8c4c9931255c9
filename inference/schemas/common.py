from pydantic import BaseModel, ConfigDict


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


class ValidationBody(BaseModel):
    detail: list[ValidationItem]


def error_responses(*statuses: int) -> dict:
    """The documented error bodies of an operation, for the OpenAPI document."""
    shapes = {403: PolicyErrorBody, 405: ValidationBody, 422: ValidationBody}
    return {status: shapes.get(status, ErrorBody) for status in statuses}

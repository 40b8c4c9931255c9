"""The floor: one bare async endpoint (validate the gateway's request model, answer a fixed body),
and the I/O floor's two (io_floor.py)."""

from typing import Annotated, Literal

from ninja import NinjaAPI
from pydantic import BaseModel, ConfigDict, Field

from . import io_floor

api = NinjaAPI(docs_url=None, openapi_url=None)

# Shaped (and sized) like the fake upstream's answer for dimensions=64.
ANSWER = {
    "object": "list",
    "model": "text-embedding-3-small",
    "data": [
        {
            "object": "embedding",
            "index": 0,
            "embedding": [round(i / 64 - 0.5, 6) for i in range(64)],
        }
    ],
    "usage": {"prompt_tokens": 4, "total_tokens": 4},
}


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1)
    input: str | Annotated[list[str], Field(min_length=1)]
    dimensions: int | None = Field(default=None, ge=1)
    encoding_format: Literal["float"] | None = "float"
    user: str | None = None


@api.post("/embeddings")
async def embeddings(request, body: EmbeddingsRequest):
    return ANSWER


# The I/O floor (io_floor.py): the same endpoint plus the wallet read, the upstream call and the
# durable commit a charged request cannot do without.
class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[dict] = Field(min_length=1)
    stream: bool = False


@api.post("/io/embeddings")
async def embeddings_io(request, body: EmbeddingsRequest):
    return await io_floor.embeddings(body.model_dump(exclude_none=True))


@api.post("/io/chat/completions")
async def chat_io(request, body: ChatRequest):
    return await io_floor.chat_stream(body.model_dump())


# The same with the budget hold of issue 40 in place of the read (io_floor.HOLD).
@api.post("/io/held/embeddings")
async def embeddings_held(request, body: EmbeddingsRequest):
    return await io_floor.embeddings(body.model_dump(exclude_none=True), held=True)


@api.post("/io/held/chat/completions")
async def chat_held(request, body: ChatRequest):
    return await io_floor.chat_stream(body.model_dump(), held=True)

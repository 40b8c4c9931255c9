"""Bodies of POST /v1/web-search and POST /v1/fetch, and their answers."""

from typing import Annotated, Literal

import httpx
from pydantic import AfterValidator, BaseModel, Field

from .common import StrictBody

DOMAIN_PATTERN = (
    r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)+$"
)
Domain = Annotated[str, Field(min_length=3, max_length=253, pattern=DOMAIN_PATTERN)]


class WebSearchRequest(StrictBody):
    query: str = Field(min_length=1, description="What to search for")
    num_results: int = Field(default=5, ge=1, le=20, description="How many results, 1..20")
    type: Literal["web", "academic"] = Field(
        default="web", description="`academic` searches scholarly works (OpenAlex)"
    )
    search_domain_filter: Annotated[list[Domain], Field(max_length=20)] | None = Field(
        default=None, description="Only results from these domains (web search only)"
    )
    country: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z]{2}$",
        description="ISO 3166-1 alpha-2 country code (web: where to search from; academic: "
        "works with an author at an institution in that country)",
    )


class SearchResult(BaseModel):
    title: str
    url: str
    snippet: str
    date: str | None
    source: str | None


class SearchUsage(BaseModel):
    num_results: int
    credits_used: int


class WebSearchResponse(BaseModel):
    id: str
    object: Literal["search"]
    query: str
    type: Literal["web", "academic"]
    results: list[SearchResult]
    usage: SearchUsage
    credits_remaining: int | None


def _http_url(value: str) -> str:
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ValueError("must be an http or https URL") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("must be an http or https URL")
    return value


Url = Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(_http_url)]


class FetchRequest(StrictBody):
    urls: list[Url] = Field(min_length=1, max_length=10, description="1..10 http(s) URLs")
    max_characters: int = Field(
        default=20_000, ge=1, le=100_000, description="Characters of content per page"
    )
    format: Literal["markdown", "text"] = Field(
        default="markdown", description="How HTML pages are converted"
    )


class FetchError(BaseModel):
    code: str
    message: str


class FetchedPage(BaseModel):
    url: str
    final_url: str | None
    status: Literal["ok", "error"]
    title: str | None
    content: str | None
    content_type: str | None
    error: FetchError | None


class FetchUsage(BaseModel):
    pages: int
    credits_used: int


class FetchResponse(BaseModel):
    id: str
    object: Literal["fetch"]
    results: list[FetchedPage]
    usage: FetchUsage
    credits_remaining: int | None

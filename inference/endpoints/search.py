"""POST /v1/web-search (service `web_search`) and POST /v1/fetch (service `fetch`).

Search and fetch are services, not models: each request is routed through a hidden catalog
entry (`web-search`, `academic-search`, `web-fetch`; never listed by GET /v1/models) whose
provider rows say who serves it and whose `cost` is the price per call or per page.
"""

from __future__ import annotations

from ninja import Router

from catalog.defaults import SERVICE_ENTRIES
from catalog.routing import Route, Routes
from core.errors import BadRequest
from core.jsonio import json_response

from .. import pipeline
from ..billing import Usage, credits_for
from ..providers import adapter_for
from ..providers.base import PageFetcher, Searcher
from ..schemas.common import error_responses
from ..schemas.search import FetchRequest, FetchResponse, WebSearchRequest, WebSearchResponse

router = Router(tags=["search"])


def _charge(route: Route, units: int) -> int:
    return credits_for(route.model.cost, Usage(units=units)) if route.model is not None else 0


class WebSearch(pipeline.Operation, endpoint="web_search"):
    body = WebSearchRequest

    def model_of(self, body: WebSearchRequest) -> str:
        return SERVICE_ENTRIES[body.type]

    def input_texts(self, body: WebSearchRequest):
        return [body.query]

    def reserve_usage(self, body: WebSearchRequest, fields: dict) -> Usage:
        return Usage(units=1)  # one search call

    def select(self, catalog, pin, allowed, body: WebSearchRequest, tags=frozenset()) -> Routes:
        if body.type == "academic":
            # The spec: `type: academic` that the license (or the pin) cannot take to an
            # academic provider is the "under the current pins" 400, header or not.
            entry = catalog.models.get(SERVICE_ENTRIES["academic"])
            reachable = {
                row.provider
                for row in (entry.rows if entry is not None else ())
                if row.provider in catalog.providers
                and catalog.providers[row.provider].serves(self.endpoint)
                and (allowed is None or row.provider in allowed)
                and (pin is None or pin.slug == row.provider)
            }
            if not reachable:
                raise BadRequest(
                    f"No provider available for endpoint '{self.endpoint}' under the current pins"
                )
        return super().select(catalog, pin, allowed, body, tags)

    def prepare(self, route: Route, body: WebSearchRequest) -> None:
        if body.search_domain_filter and route.provider.kind != "websearch":
            raise BadRequest("'search_domain_filter' is only supported with type 'web'")

    async def call(self, route: Route, body: WebSearchRequest, call) -> pipeline.ProviderResult:
        hits = await adapter_for(route.provider.kind, Searcher).search(route, body)
        results = [hit.as_dict() for hit in hits]
        return pipeline.ProviderResult(
            body={
                "id": call.request_id,
                "object": "search",
                "query": body.query,
                "type": body.type,
                "results": results,
            },
            billed_model=route.model.model_id if route.model is not None else route.upstream_model,
            usage=Usage(units=1),
            credits=_charge(route, 1),
            output_texts=[text for hit in hits for text in (hit.title, hit.snippet)],
        )

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        body["usage"] = {"num_results": len(body["results"]), "credits_used": result.credits}
        body["credits_remaining"] = remaining
        return json_response(body)


class Fetch(pipeline.Operation, endpoint="web_fetch"):
    body = FetchRequest

    def model_of(self, body: FetchRequest) -> str:
        return SERVICE_ENTRIES["fetch"]

    def input_texts(self, body: FetchRequest):
        return list(body.urls)

    def reserve_usage(self, body: FetchRequest, fields: dict) -> Usage:
        return Usage(units=len(body.urls))  # a page each, at most

    async def call(self, route: Route, body: FetchRequest, call) -> pipeline.ProviderResult:
        pages = await adapter_for(route.provider.kind, PageFetcher).fetch_pages(
            body.urls,
            max_characters=body.max_characters,
            fmt=body.format,
            allowed=_redirect_rule(call),
        )
        fetched = sum(page.ok for page in pages)
        return pipeline.ProviderResult(
            body={
                "id": call.request_id,
                "object": "fetch",
                "results": [page.as_dict() for page in pages],
            },
            billed_model=route.model.model_id if route.model is not None else route.upstream_model,
            usage=Usage(units=fetched),
            credits=_charge(route, fetched),
            output_texts=[page.content for page in pages if page.content],
        )

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        body["usage"] = {"pages": result.usage.units, "credits_used": result.credits}
        body["credits_remaining"] = remaining
        return json_response(body)


def _redirect_rule(call):
    """A license that limits `urls` to some patterns limits where redirects may lead too."""
    patterns = ()
    for rule in call.principal.license.policy.service(Fetch.service).rules:
        if rule.name == "urls" and rule.patterns:
            patterns = rule.patterns
    if not patterns:
        return lambda url: True
    return lambda url: any(pattern.fullmatch(url) for pattern in patterns)


_search = WebSearch()
_fetch = Fetch()


@router.post(
    "/web-search",
    response={200: WebSearchResponse, **error_responses(400, 401, 403, 404, 422, 429, 500, 503)},
    summary="Search the web or scholarly works",
)
async def web_search(request, body: WebSearchRequest):
    return await pipeline.run(request, _search, body)


@router.post(
    "/fetch",
    response={200: FetchResponse, **error_responses(400, 401, 403, 422, 429, 500, 503)},
    summary="Fetch pages and return their text",
)
async def fetch(request, body: FetchRequest):
    return await pipeline.run(request, _fetch, body)

"""Search adapters (`/v1/web-search`): each answers `search(route, body) -> [SearchHit]`.

`websearch`: the Brave Search API (`GET /res/v1/web/search`, `X-Subscription-Token`; base URL
https://api.search.brave.com). `academic`: the OpenAlex works API (`GET /works`; base URL
https://api.openalex.org; the connection's key, optional, is sent as `api_key`, or as `mailto`
when it is an e-mail address).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import httpx
import lxml.html
import orjson

from catalog.routing import Route

from .base import Transport, malformed, unavailable


@dataclass
class SearchHit:
    title: str
    url: str
    snippet: str
    date: str | None
    source: str | None

    def as_dict(self) -> dict:
        return asdict(self)


def _str(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _plain(fragment: str | None) -> str:
    """Brave marks the query terms with <strong>: clients get plain text."""
    if not fragment:
        return ""
    try:
        return lxml.html.fragment_fromstring(fragment, create_parent="div").text_content()
    except Exception:  # lxml refuses some odd fragments; the raw text is still better than none
        return fragment


class BraveTransport(Transport):
    kind = "websearch"

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"X-Subscription-Token": route.connection.api_key}

    def error_message(self, response: httpx.Response) -> str:
        try:
            error = orjson.loads(response.content).get("error") or {}
            return str(error.get("detail") or "")
        except (orjson.JSONDecodeError, AttributeError):
            return super().error_message(response)

    def raise_for_response(self, response: httpx.Response) -> None:
        # Brave answers a bad or missing token with a 422: the gateway's own credential failing.
        if response.status_code == 422 and b"SUBSCRIPTION_TOKEN_INVALID" in response.content:
            raise unavailable("websearch rejected the subscription token")
        super().raise_for_response(response)

    async def search(self, route: Route, body) -> list[SearchHit]:
        query = body.query
        if body.search_domain_filter:
            sites = " OR ".join(f"site:{domain}" for domain in body.search_domain_filter)
            query = f"{query} ({sites})"
        params = {"q": query, "count": body.num_results}
        if body.country:
            params["country"] = body.country.upper()
        response = await self.request(route, "GET", "/res/v1/web/search", params=params)
        try:
            answer = orjson.loads(response.content)
            items = (answer.get("web") or {}).get("results") or []
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise malformed(f"{self.kind} answer unreadable") from exc
        if not isinstance(items, list):
            raise malformed(f"{self.kind} answer without results")
        hits = []
        for item in items[: body.num_results]:
            if not isinstance(item, dict) or not _str(item.get("url")):
                continue
            profile = _dict(item.get("profile"))
            meta = _dict(item.get("meta_url"))
            page_age = _str(item.get("page_age"))
            hits.append(
                SearchHit(
                    title=_plain(_str(item.get("title"))),
                    url=item["url"],
                    snippet=_plain(_str(item.get("description"))),
                    date=page_age[:10] if page_age else _str(item.get("age")),
                    source=_str(profile.get("name")) or _str(meta.get("hostname")),
                )
            )
        return hits


def abstract_text(inverted) -> str:
    """OpenAlex ships abstracts as {word: [positions]}; put the words back in order."""
    if not isinstance(inverted, dict):
        return ""
    positions = {}
    for word, places in inverted.items():
        if isinstance(places, list):
            for place in places:
                if isinstance(place, int) and 0 <= place < 100_000:
                    positions[place] = word
    return " ".join(positions[index] for index in sorted(positions))


class OpenAlexTransport(Transport):
    kind = "academic"

    def error_message(self, response: httpx.Response) -> str:
        try:
            body = orjson.loads(response.content)
            return str(body.get("message") or body.get("error") or "")
        except (orjson.JSONDecodeError, AttributeError):
            return super().error_message(response)

    async def search(self, route: Route, body) -> list[SearchHit]:
        params = {"search": body.query, "per-page": body.num_results}
        if body.country:
            params["filter"] = f"authorships.institutions.country_code:{body.country.upper()}"
        key = route.connection.api_key
        if key:
            params["mailto" if "@" in key else "api_key"] = key
        response = await self.request(route, "GET", "/works", params=params)
        try:
            items = orjson.loads(response.content).get("results")
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise malformed(f"{self.kind} answer unreadable") from exc
        if not isinstance(items, list):
            raise malformed(f"{self.kind} answer without results")
        hits = []
        for work in items[: body.num_results]:
            if not isinstance(work, dict):
                continue
            location = _dict(work.get("primary_location"))
            source = _dict(location.get("source"))
            url = (
                _str(work.get("doi"))
                or _str(location.get("landing_page_url"))
                or _str(work.get("id"))
            )
            if url is None:
                continue
            hits.append(
                SearchHit(
                    title=_str(work.get("title")) or _str(work.get("display_name")) or "",
                    url=url,
                    snippet=abstract_text(work.get("abstract_inverted_index")),
                    date=_str(work.get("publication_date")),
                    source=_str(source.get("display_name")),
                )
            )
        return hits

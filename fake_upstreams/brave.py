"""A fake of the Brave Search API's web endpoint (`websearch`).

    GET <origin>/res/v1/web/search?q=...&count=...&country=...
    X-Subscription-Token: <api_key>

Answers Brave's `{"type": "search", "query": {...}, "web": {"results": [...]}}` with made-up
results derived from the query; a `site:` operator in `q` (as in `q (site:a.org OR site:b.org)`)
keeps results on those sites. Errors use Brave's `{"type": "ErrorResponse", "error": {"id",
"status", "code", "detail", "meta"}, "time"}` shape: a missing or wrong token is 422
`SUBSCRIPTION_TOKEN_INVALID`, a bad parameter 422 `VALIDATION`, throttling 429 `RATE_LIMITED`.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from .server import FakeUpstream, RecordedRequest, Response, json_response

COUNTRIES = frozenset(
    "ALL AR AU AT BE BR CA CL DK FI FR DE HK IN ID IT JP KR MY MX NL NZ NO CN PL PT PH RU SA ZA "
    "ES SE CH TW TR GB US".split()
)
_SITE = re.compile(r"\bsite:([A-Za-z0-9.-]+)")
CODES = {
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    422: "VALIDATION",
    429: "RATE_LIMITED",
    500: "INTERNAL_ERROR",
}


class BraveFake(FakeUpstream):
    """Knobs: ``result_count`` caps how many results exist for any query (default 20)."""

    name = "brave"
    base_path = ""
    ROUTES = [("GET", r"/res/v1/web/search", "web_search")]
    KNOBS = {"result_count": 20}

    def __init__(self, api_key: str | None = None):
        super().__init__()
        self.api_key = api_key

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        code = extra.get("code") or CODES.get(status, "ERROR")
        return json_response(
            {
                "type": "ErrorResponse",
                "error": {
                    "id": str(uuid.uuid4()),
                    "status": status,
                    "code": code,
                    "detail": message or "Request failed.",
                    "meta": extra.get("meta") or {},
                },
                "time": int(time.time()),
            },
            status,
        )

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        token = request.headers.get("x-subscription-token")
        if token != self.api_key:
            return self.error(
                422,
                "The provided subscription token is invalid.",
                code="SUBSCRIPTION_TOKEN_INVALID",
            )
        return None

    def _invalid(self, param: str, detail: str):
        return self.fail(
            422,
            "Unable to validate request parameter(s)",
            meta={"errors": [{"type": "value_error", "loc": ["query", param], "msg": detail}]},
        )

    def web_search(self, request: RecordedRequest) -> Response:
        q = request.query.get("q", "")
        if not q.strip():
            raise self._invalid("q", "field required")
        if len(q) > 400 or len(q.split()) > 50:
            raise self._invalid("q", "query too long")
        try:
            count = int(request.query.get("count", "20"))
        except ValueError:
            raise self._invalid("count", "value is not a valid integer") from None
        if not 1 <= count <= 20:
            raise self._invalid("count", "ensure this value is less than or equal to 20")
        country = request.query.get("country", "US")
        if country.upper() not in COUNTRIES:
            raise self._invalid("country", f"unexpected value; permitted: {sorted(COUNTRIES)}")
        sites = _SITE.findall(q) or ["example.com", "example.org", "example.net"]
        terms = _SITE.sub("", q).replace("(", " ").replace(")", " ").replace(" OR ", " ")
        terms = " ".join(terms.split()) or q
        slug = re.sub(r"[^a-z0-9]+", "-", terms.lower()).strip("-") or "page"
        results = []
        for index in range(min(count, self.result_count)):
            host = sites[index % len(sites)]
            day = 1 + index % 28
            results.append(
                {
                    "title": f"{terms.title()} \u2014 result {index + 1}",
                    "url": f"https://{host}/{slug}/{index + 1}",
                    "is_source_local": False,
                    "is_source_both": False,
                    "description": f"All about <strong>{terms}</strong>: page {index + 1} "
                    f"on {host} &amp; more.",
                    "page_age": f"2025-03-{day:02d}T08:00:00",
                    "profile": {
                        "name": host.split(".")[0].title(),
                        "url": f"https://{host}/",
                        "long_name": host,
                        "img": f"https://imgs.search.brave.com/{host}.png",
                    },
                    "language": "en",
                    "family_friendly": True,
                    "type": "search_result",
                    "subtype": "generic",
                    "meta_url": {
                        "scheme": "https",
                        "netloc": host,
                        "hostname": host,
                        "favicon": f"https://imgs.search.brave.com/{host}.ico",
                        "path": f"\u203a {slug} \u203a {index + 1}",
                    },
                    "age": f"March {day}, 2025",
                }
            )
        return json_response(
            {
                "type": "search",
                "query": {
                    "original": q,
                    "show_strict_warning": False,
                    "is_navigational": False,
                    "country": country.lower(),
                    "bad_results": False,
                    "should_fallback": False,
                    "postal_code": "",
                    "city": "",
                    "header_country": "",
                    "more_results_available": True,
                    "state": "",
                },
                "mixed": {
                    "type": "mixed",
                    "main": [
                        {"type": "web", "index": i, "all": False} for i in range(len(results))
                    ],
                    "top": [],
                    "side": [],
                },
                "web": {"type": "search", "results": results, "family_friendly": True},
            }
        )

"""A fake of the OpenAlex works API (`academic`).

    GET <origin>/works?search=...&per-page=...[&filter=...][&api_key=...][&mailto=...]

No key is needed; when the fake is given one, a request carrying another key is 401 (a request
without a key is still served, as OpenAlex serves anonymous callers). Answers OpenAlex's
`{"meta": {...}, "results": [work, ...], "group_by": []}` with made-up works: `doi` (null on
every third work), `abstract_inverted_index` (null on every fourth), `primary_location.source`.
Errors use OpenAlex's `{"error": ..., "message": ...}` shape.
"""

from __future__ import annotations

import re
from typing import Any

from .server import FakeUpstream, RecordedRequest, Response, json_response

FILTERS = frozenset(
    {"authorships.institutions.country_code", "institutions.country_code", "publication_year"}
)
JOURNALS = ("Journal of Made-up Results", "Annals of Synthetic Data", "Proceedings of Nothing")


class OpenAlexFake(FakeUpstream):
    """Knobs: ``result_count`` caps how many works exist for any query (default 50)."""

    name = "openalex"
    base_path = ""
    ROUTES = [("GET", r"/works", "works")]
    KNOBS = {"result_count": 50}

    def __init__(self, api_key: str | None = None):
        super().__init__()
        self.api_key = api_key

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        titles = {
            400: "Invalid query parameters error.",
            401: "Unauthorized",
            404: "Not found",
            429: "Too many requests",
        }
        return json_response(
            {
                "error": titles.get(status, "Internal server error"),
                "message": message or "Something went wrong.",
            },
            status,
        )

    def check_auth(self, request: RecordedRequest) -> Response | None:
        key = request.query.get("api_key")
        if self.api_key is not None and key is not None and key != self.api_key:
            return self.error(401, "Invalid API key.")
        return None

    def works(self, request: RecordedRequest) -> Response:
        query = request.query
        unknown = sorted(
            set(query)
            - {"search", "per-page", "per_page", "filter", "api_key", "mailto", "page", "select"}
        )
        if unknown:
            raise self.fail(400, f"{unknown[0]} is not a valid parameter.")
        try:
            per_page = int(query.get("per-page", query.get("per_page", "25")))
        except ValueError:
            raise self.fail(400, "per-page must be an integer.") from None
        if not 1 <= per_page <= 200:
            raise self.fail(400, "per-page must be between 1 and 200.")
        country = None
        for clause in filter(None, query.get("filter", "").split(",")):
            name, _, value = clause.partition(":")
            if name not in FILTERS or not value:
                raise self.fail(400, f"{name} is not a valid filter.")
            if name.endswith("country_code"):
                country = value.upper()
        search = query.get("search", "")
        words = re.findall(r"\w+", search.lower()) or ["science"]
        count = min(per_page, self.result_count)
        results = [self._work(words, index, country) for index in range(count)]
        return json_response(
            {
                "meta": {
                    "count": self.result_count,
                    "db_response_time_ms": 12,
                    "page": 1,
                    "per_page": per_page,
                    "groups_count": None,
                },
                "results": results,
                "group_by": [],
            }
        )

    @staticmethod
    def _work(words: list[str], index: int, country: str | None) -> dict:
        number = 4000000000 + index * 7919 + sum(map(ord, "".join(words)))
        title = f"On {' '.join(words).title()}: study {index + 1}"
        abstract = ["We", "study", *words, "in", "depth", "and", "report", "results"]
        inverted: dict[str, list[int]] = {}
        for position, word in enumerate(abstract):
            inverted.setdefault(word, []).append(position)
        doi = None if index % 3 == 2 else f"https://doi.org/10.5555/fake.{number}"
        journal = JOURNALS[index % len(JOURNALS)]
        return {
            "id": f"https://openalex.org/W{number}",
            "doi": doi,
            "title": title,
            "display_name": title,
            "publication_year": 2020 + index % 5,
            "publication_date": f"{2020 + index % 5}-0{1 + index % 9}-15",
            "language": "en",
            "type": "article",
            "cited_by_count": 100 - index,
            "primary_location": {
                "is_oa": index % 2 == 0,
                "landing_page_url": f"https://journals.example.org/article/{number}",
                "pdf_url": None,
                "source": None
                if index % 5 == 4
                else {
                    "id": f"https://openalex.org/S{1000 + index % 3}",
                    "display_name": journal,
                    "issn_l": "1234-5678",
                    "type": "journal",
                },
            },
            "authorships": [
                {
                    "author_position": "first",
                    "author": {"id": "https://openalex.org/A1", "display_name": "A. Author"},
                    "institutions": [
                        {"display_name": "Fake University", "country_code": country or "US"}
                    ],
                }
            ],
            "abstract_inverted_index": None if index % 4 == 3 else inverted,
        }

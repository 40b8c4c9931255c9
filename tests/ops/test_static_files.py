"""Static files (WhiteNoise) through the real ASGI stack: admin CSS and the /v1/docs assets,
compressed variants, 304s, and /v1 untouched."""

import httpx
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both_databases]


def test_admin_and_docs_assets_are_served(gateway):
    with httpx.Client(base_url=gateway.url) as http:
        css = http.get("/static/admin/css/base.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        assert "body" in css.text
        etag = css.headers.get("etag") or css.headers.get("last-modified")
        assert etag
        docs = http.get("/v1/docs")
        assert docs.status_code == 200
        for asset in ("/static/ninja/swagger-ui.css", "/static/ninja/swagger-ui-bundle.js"):
            assert asset in docs.text
            assert http.get(asset).status_code == 200
        missing = http.get("/static/admin/css/nope.css")
        assert missing.status_code == 404


def test_not_modified_and_head(gateway):
    with httpx.Client(base_url=gateway.url) as http:
        first = http.get("/static/admin/js/core.js")
        validator = first.headers.get("last-modified")
        again = http.get("/static/admin/js/core.js", headers={"If-Modified-Since": validator})
        assert again.status_code == 304 and again.content == b""
        head = http.head("/static/admin/js/core.js")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(first.content)

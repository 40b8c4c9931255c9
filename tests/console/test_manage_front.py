"""The management API's front (/manage/v1/): `Authorization: Bearer` and `Token` both accepted,
a refused header told what to send, hostile headers refused before any query; the root listing
every endpoint the router holds; the docs page over the OpenAPI document; a body over the limit
answered 413 in DRF's shape, in the view and before the body is read."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from licensing.manage_urls import DESCRIBED_BY, router
from licensing.models import ApiKey

from ..api.test_hostile_input import _raw_request, _reading_app, _run_asgi
from .test_manage_api import BASE, user_with, world  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

SEND = "Send your management token as `Authorization: Bearer <token>`"


@pytest.fixture
def token(world):  # noqa: F811
    return Token.objects.create(user=user_with("admin", world["a"]["institution"])).key


def get(header: str | None, path: str = "/licenses"):
    headers = {} if header is None else {"Authorization": header}
    return Client(headers=headers).get(BASE + path)


def test_bearer_and_token_both_authenticate(world, token):  # noqa: F811
    answers = [get(f"{scheme} {token}") for scheme in ("Bearer", "Token", "bearer", "TOKEN")]
    answers.append(get(f"  Bearer \t{token}  "))
    for answer in answers:
        assert answer.status_code == 200, answer.content
        assert [row["name"] for row in answer.json()["results"]] == ["license-a"]


@pytest.mark.parametrize(
    "header, detail",
    [
        (None, "Authentication credentials were not provided. " + SEND),
        ("Basic dXNlcjpwdw==", "Authentication credentials were not provided. " + SEND),
        ("Bearer", "The Authorization header names no token. " + SEND),
        ("Bearer   ", "The Authorization header names no token. " + SEND),
        ("Token", "The Authorization header names no token. " + SEND),
        ("Bearer nope", "Invalid token."),
    ],
    ids=["none", "basic", "bearer-alone", "bearer-blank", "token-alone", "unknown"],
)
def test_a_refused_header_says_what_to_send(world, header, detail):  # noqa: F811
    answer = get(header)
    assert answer.status_code == 401
    assert answer.json()["detail"].startswith(detail), answer.json()
    assert answer["WWW-Authenticate"] == "Bearer"


def test_an_api_key_sent_here_is_told_apart(world):  # noqa: F811
    answer = get(f"Bearer {world['a']['key']}")
    assert answer.status_code == 401
    assert answer.json()["detail"] == (
        "This is an API key for /v1, not a management token. "
        + SEND
        + " (make one on the admin's My API token page)."
    )


HOSTILE = {
    "nul": "Bearer abc\x00def",
    "nul-after-a-token": "Token {token}\x00",
    "lone-surrogate": "Bearer \ud800\udfff\ud800",
    "latin-1": "Bearer caf\xe9",
    "control": "Bearer abc\x07",
    "huge": "Bearer " + "a" * 1_000_000,
    "41-characters": "Bearer " + "a" * 41,
    "two-words": "Bearer {token} {token}",
}


@pytest.mark.parametrize("header", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_headers_are_401_without_a_query(world, token, header):  # noqa: F811
    with CaptureQueriesContext(connection) as queries:
        answer = get(header.format(token=token))
    assert (answer.status_code, answer.json()) == (401, {"detail": "Invalid token."})
    assert len(queries) == 0


def test_an_inactive_users_token_is_refused(world, token):  # noqa: F811
    user = Token.objects.get(key=token).user
    user.is_active = False
    user.save()
    answer = get(f"Bearer {token}")
    assert (answer.status_code, answer.json()) == (401, {"detail": "User inactive or deleted."})


def test_the_root_lists_every_endpoint_of_the_router(world):  # noqa: F811
    root = Client().get(BASE + "/")  # anyone: it lists paths, as the OpenAPI document does
    assert root.status_code == 200
    listed = root.json()
    prefixes = [prefix for prefix, _, _ in router.registry]
    assert list(listed) == [*prefixes, *DESCRIBED_BY]
    assert "usage" in listed
    assert listed["openapi"] == "http://testserver/manage/v1/openapi.json"
    assert listed["docs"] == "http://testserver/manage/v1/docs"
    superuser = superuser_client()
    for name, address in listed.items():
        answer = superuser.get(address.removeprefix("http://testserver"))
        assert answer.status_code == 200, (name, answer.content[:200])


def superuser_client() -> Client:
    key = Token.objects.create(user=user_with(None, superuser=True)).key
    return Client(headers={"Authorization": f"Bearer {key}"})


def test_the_docs_page_is_swagger_ui_from_the_sites_own_files(world):  # noqa: F811
    for header in ({}, {"Authorization": "Bearer junk"}, {"Authorization": "Bearer \x00"}):
        page = Client(headers=header).get(BASE + "/docs")
        assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
        body = page.content.decode()
        assert '<script src="/static/ninja/swagger-ui-bundle.js">' in body  # as /v1/docs
        assert 'href="/static/ninja/swagger-ui.css"' in body
        assert '"/manage/v1/openapi.json"' in body
        assert "cdn" not in body.lower() and "https://" not in body  # nothing from elsewhere
    for query in ("?lang=%00", "?lang=%ED%A0%80", "?version=" + "v" * 10_000):
        assert Client().get(BASE + "/docs" + query).status_code == 200
    for query in ("?format=csv", "?format=%00"):
        wrong = Client().get(BASE + "/docs" + query)  # DRF's JSON, not a page
        assert (wrong.status_code, wrong.json()) == (404, {"detail": "Not found."})


def test_the_openapi_document_says_bearer(world):  # noqa: F811
    document = Client().get(BASE + "/openapi.json").json()
    assert list(document["components"]["securitySchemes"]) == ["managementToken"]
    scheme = document["components"]["securitySchemes"]["managementToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "Authorization: Bearer <token>" in document["info"]["description"]
    licenses = document["paths"]["/manage/v1/licenses"]["get"]
    assert {"managementToken": []} in licenses["security"]
    usage = document["paths"]["/manage/v1/usage"]["get"]["responses"]["200"]
    assert usage["content"]["application/json"]["schema"]["$ref"].endswith("/UsageReport")


# --- bodies over the limit -----------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_in_drfs_shape(world, settings):  # noqa: F811
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client = superuser_client()
    lic = world["a"]["license"].pk
    keys = ApiKey.objects.count()
    too_large = {"detail": "Request body is larger than 1000 bytes."}
    for answer in (
        client.post(BASE + "/keys", {"license": lic, "name": "x" * 2000}),  # multipart
        client.post(
            BASE + "/keys",
            f"license={lic}&name={'x' * 2000}",
            content_type="application/x-www-form-urlencoded",
        ),
        client.post(
            BASE + "/keys", {"license": lic, "name": "x" * 2000}, content_type="application/json"
        ),
        client.put(
            BASE + f"/courses/{world['a']['course'].pk}/members",
            {"students": ["s" * 40] * 40},
            content_type="application/json",
        ),
    ):
        assert (answer.status_code, answer.json()) == (413, too_large)
    assert ApiKey.objects.count() == keys


def test_the_early_413_before_the_body_is_read():
    """gateway_site.bodylimit: /manage/v1 as /v1, in DRF's shape; the admin untouched."""
    from gateway_site.bodylimit import BodyLimit

    app = BodyLimit(_reading_app, max_bytes=1000)
    chunks = [{"type": "http.request", "body": b"x" * 300, "more_body": True}] * 10
    sent, read = _run_asgi(app, "/manage/v1/keys", chunks)
    assert (sent[0]["status"], read) == (413, 4)
    assert sent[1]["body"] == b'{"detail":"Request body is larger than 1000 bytes."}'
    announced = [(b"content-length", b"1001")]
    sent, read = _run_asgi(app, "/manage/v1/keys", chunks[:1], announced)
    assert (sent[0]["status"], read) == (413, 0)
    whole = [*chunks[:3], {"type": "http.request", "body": b"x" * 300, "more_body": False}]
    sent, read = _run_asgi(app, "/admin/login/", whole, [(b"content-length", b"1200")])
    assert (sent[0]["status"], read) == (200, 4)


@pytest.mark.django_db(transaction=True)
def test_an_announced_body_over_the_limit_is_refused_by_the_server(gateway, world):  # noqa: F811
    head = (
        f"POST /manage/v1/keys HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
        f"Content-Type: application/json\r\n"
        f"Content-Length: {django_settings.GATEWAY_MAX_BODY_BYTES + 1}\r\n\r\n"
    ).encode()
    answer, _, seconds = _raw_request(gateway, head, [b"x" * 65536] * 16)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    limit = django_settings.GATEWAY_MAX_BODY_BYTES
    assert answer.endswith(b'{"detail":"Request body is larger than %d bytes."}' % limit)
    assert seconds < 3

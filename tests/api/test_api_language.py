"""The /v1 API speaks the spec's English whatever the caller's language (docs/languages.md): an
error asked for in German, with the menu's cookie and a German browser's header, is byte for
byte the English one, and nothing on /v1 says or varies by language."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

GERMAN = {"Accept-Language": "de-DE,de;q=0.9", "Cookie": "django_language=de"}
REQUESTS = [
    ("GET", "/v1/models", {"Authorization": "Bearer sk-svc-unknown"}, None),  # 401
    ("GET", "/v1/license", {}, None),  # 401, no credentials
    ("GET", "/v1/nowhere", {}, None),  # 404
    ("DELETE", "/v1/chat/completions", {}, None),  # 405
    ("POST", "/v1/chat/completions", {"Content-Type": "application/json"}, b"{"),  # 401/422
]


@pytest.mark.parametrize(("method", "path", "headers", "body"), REQUESTS)
def test_an_error_asked_for_in_german_is_the_english_one(client, method, path, headers, body):
    english = client.request(method, path, headers=headers, content=body)
    german = client.request(method, path, headers={**headers, **GERMAN}, content=body)
    assert english.status_code >= 400
    assert (german.status_code, german.content) == (english.status_code, english.content)
    for response in (english, german):
        assert "Content-Language" not in response.headers
        assert "Accept-Language" not in response.headers.get("Vary", "")


def test_a_refusal_of_a_known_key_is_the_english_one(client, auth, catalog):
    body = {"model": "no-such-model", "messages": [{"role": "user", "content": "Hallo"}]}
    english = client.post("/v1/chat/completions", headers=auth, json=body)
    german = client.post("/v1/chat/completions", headers={**auth, **GERMAN}, json=body)
    assert english.status_code >= 400 and english.json()["error"]["message"].isascii()
    assert (german.status_code, german.content) == (english.status_code, english.content)

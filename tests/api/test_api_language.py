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


def test_the_hot_path_reads_no_catalogue_and_asks_no_language(client, auth, catalog, monkeypatch):
    """`USE_I18N = True` costs /v1 nothing: a charged request, a refused one and an unknown
    key's go through no gettext and no language lookup (the live server runs in this process,
    so the counters see its threads)."""
    from django.utils import translation

    calls: list[str] = []
    for name in ("gettext", "ngettext", "pgettext", "get_language", "activate"):
        real = getattr(translation._trans, name)  # Django caches the backend's functions here

        def counting(*args, _name=name, _real=real, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(translation._trans, name, counting)
    body = {"model": "text-embedding-3-small", "input": "eins zwei drei"}
    for headers in (auth, {**auth, **GERMAN}):
        assert client.post("/v1/embeddings", headers=headers, json=body).status_code == 200
        refused = client.post("/v1/embeddings", headers=headers, json={**body, "model": "nope"})
        assert refused.status_code >= 400
        assert (
            client.get("/v1/models", headers={"Authorization": "Bearer sk-svc-x"}).status_code
            == 401
        )
    assert calls == []

"""Every /manage/v1 endpoint that takes a body or a filter, given what no database or JSON
encoder should meet (a lone surrogate, NUL, 1e400, 2**64): a 4xx, never a 500. DRF echoes a
refused value in its message ('"\\ud800" is not a valid choice.'), so the renderer must be able
to write any string the parser read."""

from __future__ import annotations

import json

import pytest

from licensing.models import ApiKey

from .test_manage_api import BASE, token_client, user_with
from .test_manage_api import world as world  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

HOSTILE = ["\ud800", "a\x00b", 1e400, 2**64, -1, "abc", [], {}, None, True]


def _body(value) -> str:
    return json.dumps(value, allow_nan=True).replace("Infinity", "1e400")


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_bodies_with_hostile_values_are_4xx(world, value):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    posts = {
        "/keys": ["license", "name", "expires_at"],
        "/courses": ["license", "name", "code", "allowance", "allowance_period"],
    }
    for path, fields in posts.items():
        for field in fields:
            answer = client.post(
                BASE + path, _body({field: value}), content_type="application/json"
            )
            assert 400 <= answer.status_code < 500, (path, field, answer.content[:300])
            json.loads(answer.content)  # a JSON body, whatever was echoed


@pytest.mark.parametrize("value", ["%ED%A0%80", "a%00b", "1e400", str(2**64), "-1"], ids=repr)
def test_filters_with_hostile_values_are_4xx_or_empty(world, value):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    for path, name in [
        ("/licenses", "license_type"),
        ("/keys", "license"),
        ("/end-users", "issuer"),
        ("/audit", "action"),
        ("/connections", "state"),
        ("/courses", "license"),
        ("/transactions", "outcome"),
    ]:
        answer = client.get(f"{BASE}{path}?{name}={value}")
        assert answer.status_code in (200, 400), (path, name, answer.content[:300])


# --- issue 35: the one bounded JSON reader, offsets no time zone has ---------------------------

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("body", [DEEP, '{"name": ' + DEEP + "}"], ids=["array", "field"])
def test_a_5000_deep_body_is_400_naming_the_nesting(world, body):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    course = world["a"]["course"]
    for method, path in [
        ("patch", f"/courses/{course.pk}"),
        ("post", "/courses"),
        ("post", "/keys"),
    ]:
        answer = getattr(client, method)(BASE + path, body, content_type="application/json")
        assert answer.status_code == 400, (method, path, answer.content[:300])
        assert "Nesting deeper than 64 levels" in answer.json()["detail"]


def test_bodies_the_reader_refuses_say_what_and_where(world, settings):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    for body, said in [
        ('{"name": "\\ud800"}', "Lone surrogate in string at character 10"),
        ('{"name": 1e400}', "Number out of range at character 9"),
        ('{"name": ' + "9" * 5000 + "}", "Number too large"),
        ('{"name": NaN}', "Invalid constant NaN"),
        ('{"name": "x"', "JSON parse error"),
        (b'{"name": "\xed\xa0\x80"}', "is not utf-8 text"),
    ]:
        answer = client.post(BASE + "/keys", body, content_type="application/json")
        assert answer.status_code == 400, (body, answer.content[:300])
        assert said in answer.json()["detail"], answer.json()
    # Past Django's DATA_UPLOAD_MAX_MEMORY_SIZE: 413 in DRF's shape, whether Django's own check
    # or the reader's refuses it, never read whole into a view (test_manage_front.py: the rest).
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    keys = ApiKey.objects.count()
    body = {"license": world["a"]["license"].pk, "name": "x" * 1000}
    big = client.post(BASE + "/keys", body, content_type="application/json")
    assert big.status_code == 413 and ApiKey.objects.count() == keys
    assert big.json() == {"detail": "Request body is larger than 1000 bytes."}


OFFSETS = ["2020-01-17T03:08:28-22:05", "2020-01-17T03:08:28-17:31", "2020-01-17T03:08:28+14:01"]


@pytest.mark.parametrize("when", OFFSETS)
def test_filters_with_an_offset_no_time_zone_has_are_400_naming_the_field(world, when):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    course = world["a"]["course"]
    for path, name in [
        ("/keys", "used_since"),
        ("/audit", "since"),
        ("/audit", "until"),
        ("/transactions", "since"),
        (f"/courses/{course.pk}/usage", "until"),
    ]:
        answer = client.get(BASE + path, {name: when})
        assert answer.status_code == 400, (path, name, answer.content[:300])
        assert "beyond ±14:00" in answer.json()[name][0], answer.json()
    assert (
        client.get(BASE + "/keys", {"used_since": "2020-01-17T03:08:28+14:00"}).status_code == 200
    )
    assert client.get(BASE + "/audit", {"until": "2020-01-17T03:08:28-12:00"}).status_code == 200


@pytest.mark.parametrize("when", OFFSETS)
def test_bodies_with_an_offset_no_time_zone_has_are_400_naming_the_field(world, when):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    a = world["a"]
    course, lic = a["course"], a["license"]
    later = "2020-01-18T03:08:28Z"
    for path, body, name in [
        ("/keys", {"license": lic.pk, "name": "k", "expires_at": when}, "expires_at"),
        (f"/courses/{course.pk}/windows", {"starts_at": when, "ends_at": later}, "starts_at"),
        (
            f"/courses/{course.pk}/keys",
            {"student": a["end_user"].pk, "expires_at": when},
            "expires_at",
        ),
    ]:
        answer = client.post(BASE + path, body, content_type="application/json")
        assert answer.status_code == 400, (path, answer.content[:300])
        assert "beyond ±14:00" in answer.json()[name][0], answer.json()


@pytest.mark.parametrize("value", [str(2**64), "1e400", "-1", "%00", "%ED%A0%80", "abc"], ids=repr)
def test_path_ids_and_query_values_no_row_has_are_4xx_or_empty(world, value):  # noqa: F811
    client = token_client(user_with(None, superuser=True))
    course = world["a"]["course"]
    for path in [
        f"/keys/{value}",
        f"/licenses/{value}",
        f"/end-users/{value}",
        f"/transactions/{value}",
        f"/audit/{value}",
        f"/courses/{value}",
        f"/courses/{course.pk}/members/{value}",
        f"/courses/{course.pk}/windows/{value}",
        f"/keys?page_size={value}",
        f"/keys?cursor={value}",
        f"/keys?name=a{value}",
        f"/keys?prefix={value}",
        f"/end-users?subject={value}",
        f"/courses?code={value}",
        f"/audit?actor={value}",
        f"/transactions?q={value}",
        f"/transactions?status={value}",
        f"/courses/{course.pk}/usage?since={value}",
    ]:
        method = {"/members/": client.patch, "/windows/": client.delete}.get(
            next((part for part in ("/members/", "/windows/") if part in path), ""), client.get
        )
        answer = method(BASE + path, {}, content_type="application/json")
        assert answer.status_code in (200, 400, 404), (path, answer.content[:300])

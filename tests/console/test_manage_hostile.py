"""Every /manage/v1 endpoint that takes a body or a filter, given what no database or JSON
encoder should meet (a lone surrogate, NUL, 1e400, 2**64): a 4xx, never a 500. DRF echoes a
refused value in its message ('"\\ud800" is not a valid choice.'), so the renderer must be able
to write any string the parser read."""

from __future__ import annotations

import json

import pytest

from .test_manage_api import BASE, token_client, user_with
from .test_manage_api import world as world  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db

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

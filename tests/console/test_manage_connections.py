"""GET /manage/v1/connections: every connection with its circuit (closed, open with its cool-down
end and last error, half-open), read from this process's circuits or from Redis; superusers
only (an institution admin's or a reviewer's token is 403); never a credential in the body, a
base URL without its user, password or query; bad query parameters are 400, unknown ones
ignored."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.db import connection as db_connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from catalog.circuit import circuits, circuits_reset
from catalog.models import Connection
from catalog.selectors import connection_circuit_key
from catalog.services import catalog_load_defaults, connection_configure
from core import clock
from tests.processes import redis_server_or_skip

from .test_manage_api import token_client, user_with

pytestmark = pytest.mark.django_db

LIST = "/manage/v1/connections"
KEY_A = "sk-upstream-SECRET-conn-a-1234567890"
KEY_B = "sk-upstream-SECRET-conn-b-0987654321"
PASSWORD = "url-SECRET-password"
URL_KEY = "url-SECRET-query-key"
AWS_ID = "AKIA-SECRET-ACCESS-ID"
AWS_SECRET = "aws-SECRET-secret-abcdefghijkl"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture(autouse=True)
def fresh_circuits():
    circuits_reset()
    yield
    circuits_reset()


@pytest.fixture
def connections(db):
    catalog_load_defaults()
    a = connection_configure(
        provider_slug="direct",
        base_url="https://api.example.test/v1",
        api_key=KEY_A,
        weight=3,
        tags=["eu", "on-premises"],
    )
    b = connection_configure(
        provider_slug="direct",
        name="b",
        base_url=f"https://tenant:{PASSWORD}@b.example.test:8443/v1?key={URL_KEY}#frag",
        api_key=KEY_B,
        weight=0,
    )
    aws = connection_configure(
        provider_slug="cloud",
        base_url="https://bedrock.example.test",
        region="eu-central-1",
        aws_access_key_id=AWS_ID,
        aws_secret_access_key=AWS_SECRET,
        tags=["eu"],
    )
    return {"a": a, "b": b, "aws": aws}


@pytest.fixture
def superuser(db):
    return token_client(user_with(None, superuser=True))


def fail(conn: Connection, reason: str, retry_after: float | None = None, times: int = 1) -> None:
    """`times` failed attempts on the connection's circuit, as the attempt loop records them."""

    async def record():
        breakers = circuits()
        for _ in range(times):
            await breakers.failed(connection_circuit_key(conn), reason, retry_after)
        client = getattr(breakers, "client", None)
        if client is not None:  # Redis: its client belongs to this loop, which ends here
            await client.aclose()

    asyncio.run(record())
    if settings.REDIS_URL:
        circuits_reset()  # forget the closed client (the state is in Redis)


def by_name(body: list[dict]) -> dict[str, dict]:
    return {f"{row['provider']}/{row['name']}": row for row in body}


@pytest.fixture(params=["local", "redis"])
def backend(request, tmp_path):
    """The circuits as one process keeps them, or shared in Redis."""
    circuits_reset()
    if request.param == "local":
        with override_settings(REDIS_URL=None):
            yield None
    else:
        server = redis_server_or_skip(tmp_path)
        try:
            with override_settings(REDIS_URL=server.url):
                yield server
        finally:
            circuits_reset()
            server.stop()
    circuits_reset()


def test_shape_and_states(connections, superuser, backend):
    a, b, aws = connections["a"], connections["b"], connections["aws"]
    with clock.frozen(NOW) as frozen:
        fail(a, "status_5xx", times=5)  # CIRCUIT_FAILURES (5) in a row: open for 30 s
        frozen.advance(1)
        fail(b, "status_429", retry_after=120)  # a 429's Retry-After: open that long
        fail(aws, "timeout")  # one failure: still closed
        frozen.advance(1)
        body = superuser.get(LIST).json()
        rows = by_name(body)
        assert list(rows) == ["cloud/default", "direct/b", "direct/default"]
        assert rows["direct/default"] == {
            "id": a.pk,
            "provider": "direct",
            "name": "default",
            "base_url": "https://api.example.test/v1",
            "weight": 3,
            "tags": ["eu", "on-premises"],
            "active": True,
            "state": "open",
            "failures": 5,
            "last_error": "status_5xx",
            "last_error_at": iso(NOW),
            "open_until": iso(NOW + 30),
        }
        assert rows["direct/b"] | {"id": 0} == {
            "id": 0,
            "provider": "direct",
            "name": "b",
            "base_url": "https://b.example.test:8443/v1",
            "weight": 0,
            "tags": [],
            "active": True,
            "state": "open",
            "failures": 1,
            "last_error": "status_429",
            "last_error_at": iso(NOW + 1),
            "open_until": iso(NOW + 121),
        }
        closed = rows["cloud/default"]
        assert (closed["state"], closed["failures"], closed["open_until"]) == ("closed", 1, None)
        assert (closed["last_error"], closed["last_error_at"]) == ("timeout", iso(NOW + 1))

        # The cool-down of `a` is over: half-open, the next request is the probe.
        frozen.advance(30)
        rows = by_name(superuser.get(LIST).json())
        assert rows["direct/default"]["state"] == "half_open"
        assert rows["direct/default"]["open_until"] == iso(NOW + 30)
        assert rows["direct/b"]["state"] == "open"

        # Filters: the circuit's state, a tag, the provider, active.
        assert [r["name"] for r in superuser.get(LIST, {"state": "open"}).json()] == ["b"]
        half = superuser.get(LIST, {"state": "half_open"}).json()
        assert [r["name"] for r in half] == ["default"]
        eu = by_name(superuser.get(LIST, {"tag": "EU"}).json())
        assert set(eu) == {"cloud/default", "direct/default"}
        assert by_name(superuser.get(LIST, {"tag": "on-premises"}).json()).keys() == {
            "direct/default"
        }
        assert superuser.get(LIST, {"tag": "o"}).json() == []
        direct = by_name(superuser.get(LIST, {"provider": "direct"}).json())
        assert set(direct) == {"direct/default", "direct/b"}
        assert superuser.get(LIST, {"active": "false"}).json() == []

        # One connection.
        one = superuser.get(f"{LIST}/{a.pk}").json()
        assert one == by_name(superuser.get(LIST).json())["direct/default"]

        # Saving a connection starts a fresh, closed circuit.
        connection_configure(
            provider_slug="direct", name="b", base_url="https://b2.example.test/v1", weight=2
        )
        rows = by_name(superuser.get(LIST).json())
        assert (rows["direct/b"]["state"], rows["direct/b"]["failures"]) == ("closed", 0)
        assert rows["direct/b"]["last_error"] == "" and rows["direct/b"]["open_until"] is None


def test_every_circuit_is_read_at_once(connections, superuser, monkeypatch):
    import catalog.selectors

    calls = []
    real = catalog.selectors.read_circuits

    def counting(keys):
        calls.append(list(keys))
        return real(keys)

    monkeypatch.setattr(catalog.selectors, "read_circuits", counting)
    with CaptureQueriesContext(db_connection) as queries:
        assert len(superuser.get(LIST).json()) == 3
    assert len(calls) == 1 and len(calls[0]) == 3
    before = len(queries.captured_queries)
    for n in range(5):
        connection_configure(provider_slug="aggregator", name=f"n{n}", base_url="https://x.test")
    calls.clear()
    with CaptureQueriesContext(db_connection) as queries:
        assert len(superuser.get(LIST).json()) == 8
    assert len(calls) == 1 and len(queries.captured_queries) == before


def test_no_credential_is_ever_in_the_body(connections, superuser):
    fail(connections["b"], "status_401")
    for response in (superuser.get(LIST), superuser.get(f"{LIST}/{connections['b'].pk}")):
        assert response.status_code == 200
        text = response.content.decode()
        for secret in (KEY_A, KEY_B, PASSWORD, URL_KEY, AWS_ID, AWS_SECRET, "tenant", "frag"):
            assert secret not in text
    keys = {key for row in superuser.get(LIST).json() for key in row}
    assert not keys & {"api_key", "aws_access_key_id", "aws_secret_access_key", "region"}


def test_only_superusers_may_read_it(connections):
    from .test_admin import make_licensing

    institution = make_licensing("a")["institution"]
    for role in ("admin", "reviewer"):
        client = token_client(user_with(role, institution))
        for path in (LIST, f"{LIST}/{connections['a'].pk}"):
            response = client.get(path)
            assert response.status_code == 403, (role, path)
            assert KEY_A not in response.content.decode()
    assert token_client(user_with(None)).get(LIST).status_code == 403  # staff, no role
    assert Client().get(LIST).status_code == 401
    assert Client(headers={"Authorization": "Token nope"}).get(LIST).status_code == 401


def test_writes_are_not_routed(connections, superuser):
    body = json.dumps({"provider": "direct", "name": "x", "base_url": "https://x.test"})
    for method in ("post", "put", "patch", "delete"):
        path = LIST if method == "post" else f"{LIST}/{connections['a'].pk}"
        response = getattr(superuser, method)(path, body, content_type="application/json")
        assert response.status_code == 405, method
    assert Connection.objects.count() == 3


@pytest.mark.parametrize(
    "params",
    [
        {"state": "broken"},
        {"state": "closed\x00"},
        {"tag": "x" * 33},
        {"provider": "d\x00"},
        {"provider": "p" * 65},
    ],
    ids=lambda p: ",".join(f"{k}={v[:8]!r}" for k, v in p.items()),
)
def test_bad_parameters_are_400(connections, superuser, params):
    response = superuser.get(LIST, params)
    assert response.status_code == 400, response.content
    assert set(response.json()) <= set(params)


def test_unknown_and_odd_parameters(connections, superuser):
    odd = {"page_size": "-1", "cursor": "x", "ordering": "a", "active": "maybe"}
    assert len(superuser.get(LIST, odd).json()) == 3
    assert superuser.get(LIST, {"tag": "'; DROP TABLE x; --"}).json() == []
    assert superuser.get(LIST, {"provider": "nobody"}).json() == []
    assert superuser.get(LIST, {"tag": "%"}).json() == []
    for bad in ("abc", "99999999999999999999999", "-1", "%00"):
        assert superuser.get(f"{LIST}/{bad}").status_code == 404, bad


def test_redis_down_reads_as_closed(connections, superuser):
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        body = superuser.get(LIST).json()
    assert {row["state"] for row in body} == {"closed"}


def test_in_the_openapi_document(db):
    paths = Client().get("/manage/v1/openapi.json").json()["paths"]
    assert "/manage/v1/connections" in paths and "/manage/v1/connections/{id}" in paths

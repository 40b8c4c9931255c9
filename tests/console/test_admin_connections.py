"""The admin's connection list as an operator reads it: weight, tags, the circuit's state, the last
error and when, the cool-down's end; every circuit of the page read in one call; the tag filter;
the change form's weight and tags (saved, and a bad tag refused with its message); and still
never a credential."""

from __future__ import annotations

import asyncio

import pytest

import catalog.selectors
from catalog.circuit import circuits, circuits_reset
from catalog.models import Connection
from catalog.selectors import connection_circuit_key
from catalog.services import catalog_load_defaults, connection_configure
from core import clock

from .test_admin import form_data, url

pytestmark = pytest.mark.django_db

SECRET = "sk-upstream-SECRET-admin-list-1234567890"
NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


@pytest.fixture(autouse=True)
def local_circuits(settings):
    settings.REDIS_URL = None
    circuits_reset()
    yield
    circuits_reset()


@pytest.fixture
def connections(db):
    catalog_load_defaults()
    a = connection_configure(
        provider_slug="direct",
        base_url="https://api.example.test/v1",
        api_key=SECRET,
        weight=3,
        tags=["eu", "on-premises"],
    )
    b = connection_configure(
        provider_slug="direct",
        name="b",
        base_url="https://tenant:pw-SECRET@b.example.test/v1?key=q-SECRET",
        api_key=SECRET,
        weight=0,
    )
    us = connection_configure(
        provider_slug="aggregator", base_url="https://or.example.test", api_key=SECRET
    )
    return {"a": a, "b": b, "us": us}


def fail(conn: Connection, reason: str, retry_after: float | None = None, times: int = 1):
    async def record():
        for _ in range(times):
            await circuits().failed(connection_circuit_key(conn), reason, retry_after)

    asyncio.run(record())


def cells(html: str, field: str) -> list[str]:
    """The text of each row's cell of a list_display column, in order."""
    import re

    found = re.findall(rf'<td class="field-{field}[^"]*">(.*?)</td>', html, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in found]


def test_list_shows_weight_tags_and_circuits(admin_client, connections):
    with clock.frozen(NOW) as frozen:
        fail(connections["a"], "status_5xx", times=5)  # opens for CIRCUIT_COOLDOWN (30 s)
        fail(connections["b"], "timeout")  # one failure: still closed
        frozen.advance(5)
        html = admin_client.get(url(Connection, "changelist")).content.decode()
        # Rows by provider slug, then name: aggregator/default, direct/b, direct/default.
        assert cells(html, "weight") == ["1", "0", "3"]
        assert cells(html, "tag_list") == ["-", "-", "eu, on-premises"]
        assert cells(html, "circuit_state") == ["closed", "closed", "open"]
        errors = cells(html, "last_error")
        assert errors[0] == "-"
        assert errors[1] == "timeout 2027-01-15 08:00:00 UTC"
        assert errors[2] == "status_5xx 2027-01-15 08:00:00 UTC"
        assert cells(html, "cooldown_until") == ["-", "-", "2027-01-15 08:00:30 UTC"]
        assert "5 failure(s) in a row" in html
        # A base URL is shown without its user, password or query.
        assert cells(html, "shown_base_url")[1] == "https://b.example.test/v1"
        assert "SECRET" not in html

        frozen.advance(30)  # the cool-down is over: the next request probes
        html = admin_client.get(url(Connection, "changelist")).content.decode()
        assert cells(html, "circuit_state")[2] == "half-open"
        assert cells(html, "cooldown_until")[2] == "-"


def test_every_circuit_of_the_page_in_one_read(admin_client, connections, monkeypatch):
    calls = []
    real = catalog.selectors.read_circuits

    def counting(keys):
        calls.append(list(keys))
        return real(keys)

    monkeypatch.setattr(catalog.selectors, "read_circuits", counting)
    assert admin_client.get(url(Connection, "changelist")).status_code == 200
    assert [len(keys) for keys in calls] == [3]


def test_tag_filter(admin_client, connections):
    connection_configure(
        provider_slug="aggregator", name="eu", base_url="https://eu.test", tags=["eu"]
    )
    changelist = url(Connection, "changelist")
    html = admin_client.get(changelist).content.decode()
    assert "?tag=eu" in html and "?tag=on-premises" in html
    eu = admin_client.get(changelist, {"tag": "eu"}).content.decode()
    assert cells(eu, "name") == ["eu", "default"]
    assert cells(admin_client.get(changelist, {"tag": "on-premises"}).content.decode(), "name") == [
        "default"
    ]
    assert cells(admin_client.get(changelist, {"tag": "e"}).content.decode(), "name") == []
    assert admin_client.get(changelist, {"tag": "eu", "_facets": "1"}).status_code == 200


def test_change_form_saves_weight_and_tags(admin_client, connections):
    conn = connections["b"]
    change = url(Connection, "change", conn.pk)
    data = form_data(admin_client.get(change))
    assert data["weight"] == "0" and data["tags"] == ""
    data.update(weight="7", tags=" EU, on-premises ,eu")
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    conn.refresh_from_db()
    assert (conn.weight, conn.tags) == (7, "eu,on-premises")

    data.update(tags="eu, not a tag!")
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "Invalid tag(s): not a tag!" in response.content.decode()
    data.update(tags="eu", weight="1001")
    response = admin_client.post(change, data)
    assert response.status_code == 200 and "weight" in response.context["adminform"].form.errors
    conn.refresh_from_db()
    assert (conn.weight, conn.tags) == (7, "eu,on-premises")


def test_saving_closes_the_circuit(admin_client, connections):
    conn = connections["a"]
    fail(conn, "status_5xx", times=5)
    changelist = url(Connection, "changelist")
    assert "open" in cells(admin_client.get(changelist).content.decode(), "circuit_state")
    data = form_data(admin_client.get(url(Connection, "change", conn.pk)))
    assert admin_client.post(url(Connection, "change", conn.pk), data).status_code == 302
    html = admin_client.get(changelist).content.decode()
    assert cells(html, "circuit_state") == ["closed", "closed", "closed"]


def test_institution_admins_do_not_see_connections(connections):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from licensing.models import AdminProfile

    from .test_admin import make_licensing

    user = get_user_model().objects.create_user("inst-admin", password="pw", is_staff=True)
    AdminProfile.objects.create(
        user=user, institution=make_licensing("a")["institution"], role="admin"
    )
    client = Client()
    client.force_login(user)
    assert client.get(url(Connection, "changelist")).status_code == 403

"""The steps of licensing.access.reach (the portal's usable_models) without a catalog or a database:
which requests one model's search asks provider selection for (the unpinned one, then one
pinned to each provider), when a service counts as usable, and that each destination is
listed once. The whole selector against the catalog is tests/portal/test_portal.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from catalog.routing import ProviderPin
from core.errors import GatewayError
from licensing.access import reach
from licensing.access.reach import Destination, ModelAccess, _ModelSearch, _pins_of

SERVICE = SimpleNamespace(endpoint="chat.completions", output_modality=None)


def route(provider, connection, tags=(), region=""):
    return SimpleNamespace(
        provider=SimpleNamespace(slug=provider),
        connection=SimpleNamespace(name=connection, tags=frozenset(tags), region=region),
    )


def test_the_pins_are_the_unpinned_request_then_each_provider_once():
    entry = SimpleNamespace(rows=[SimpleNamespace(provider=p) for p in ("b", "a", "b")])
    assert _pins_of(entry) == [None, ProviderPin("b", None), ProviderPin("a", None)]
    assert _pins_of(SimpleNamespace(rows=[])) == [None]


def search_with(monkeypatch, answers):
    """A search whose provider selection answers `answers[pin's provider or None]`: a list
    of routes, or an exception."""
    asked = []

    def select_routes(catalog, *, pin, allowed, tags, pick, **kwargs):
        asked.append((pin, allowed, tags, pick, kwargs))
        answer = answers[pin.slug if pin is not None else None]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(reach, "select_routes", select_routes)
    policy = SimpleNamespace(connection_tags=frozenset({"eu"}))
    pins = [None] + [ProviderPin(p, None) for p in answers if p is not None]
    search = _ModelSearch("catalog", policy, ModelAccess(model_id="m"), pins)
    return search, asked


def test_a_service_is_usable_when_the_unpinned_request_finds_a_route(monkeypatch):
    search, asked = search_with(
        monkeypatch,
        {None: [route("a", "a1", {"eu"}), route("b", "b1")], "a": [route("a", "a1", {"eu"})]},
    )
    assert search.service_usable(SERVICE, SimpleNamespace(providers=frozenset({"a", "b"})))
    assert search.access.destinations == [
        Destination("a", "a1", ("eu",), ""),
        Destination("b", "b1", (), ""),
    ]
    pin, allowed, tags, pick, kwargs = asked[0]
    assert (pin, allowed, tags, pick) == (None, frozenset({"a", "b"}), frozenset({"eu"}), False)
    assert kwargs == {"endpoint": "chat.completions", "model": "m", "output_modality": None}


def test_a_pinned_route_is_a_destination_but_makes_no_service_usable(monkeypatch):
    refused = GatewayError("no route")
    search, _ = search_with(monkeypatch, {None: refused, "b": [route("b", "b2", region="x")]})
    assert not search.service_usable(SERVICE, SimpleNamespace(providers=None))
    assert search.access.destinations == [Destination("b", "b2", (), "x")]


def test_destinations_stay_once_across_services(monkeypatch):
    search, _ = search_with(monkeypatch, {None: [route("a", "a1")], "a": [route("a", "a1")]})
    assert search.service_usable(SERVICE, SimpleNamespace(providers=None))
    assert search.service_usable(SERVICE, SimpleNamespace(providers=None))
    assert search.access.destinations == [Destination("a", "a1", (), "")]


@pytest.mark.parametrize("answers", [{None: []}, {None: [], "a": GatewayError("x")}])
def test_an_unpinned_request_without_failovers_is_still_usable(monkeypatch, answers):
    search, _ = search_with(monkeypatch, answers)
    assert search.service_usable(SERVICE, SimpleNamespace(providers=None))
    assert search.access.destinations == []

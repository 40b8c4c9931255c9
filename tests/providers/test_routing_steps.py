"""catalog.routing's steps, each on its own, on test_routing's catalog (no database, no server):
the candidate providers, a model's rows in order, a pinned connection's route, the failovers."""

from __future__ import annotations

import pytest

from catalog.routing import (
    ConnectionMisconfigured,
    ProviderPin,
    _candidates,
    _failovers,
    _model_rows,
    _pinned_route,
)
from core.errors import BadRequest

from .test_routing import CATALOG, conn

CHAT = "chat_completions"
NO_TAGS: frozenset[str] = frozenset()
EU = frozenset({"eu"})


def test_the_candidates_are_the_providers_that_serve_and_are_allowed():
    serving = _candidates(CATALOG, CHAT, None, None)
    assert serving == {"direct", "aggregator", "second", "cloud"}
    assert _candidates(CATALOG, CHAT, None, frozenset({"second", "websearch"})) == {"second"}
    assert _candidates(CATALOG, CHAT, ProviderPin("second", None), None) == {"second"}


@pytest.mark.parametrize(
    ("pin", "allowed", "message"),
    [
        (ProviderPin("websearch", None), None, "under the current pins"),
        (ProviderPin("direct", None), frozenset({"second"}), "under the current pins"),
        (None, frozenset({"websearch"}), "for endpoint 'chat_completions'"),
    ],
)
def test_no_candidate_is_the_spec_400(pin, allowed, message):
    with pytest.raises(BadRequest) as refused:
        _candidates(CATALOG, CHAT, pin, allowed)
    assert refused.value.message.endswith(message)


def test_a_models_rows_owner_first_then_priority_among_the_candidates():
    entry = CATALOG.models["gpt-4o-mini"]
    everyone = {"direct", "aggregator", "second"}
    assert _model_rows(entry, CHAT, "gpt-4o-mini", everyone, False, None) == [
        ("direct", "gpt-4o-mini"),
        ("aggregator", "openai/gpt-4o-mini"),
        ("second", "gpt-4o-mini-2"),
    ]
    rows = _model_rows(entry, CHAT, "gpt-4o-mini", {"second", "aggregator"}, False, None)
    assert rows == [("aggregator", "openai/gpt-4o-mini"), ("second", "gpt-4o-mini-2")]


@pytest.mark.parametrize(
    ("model_id", "candidates", "pinned", "modality", "message"),
    [
        ("gpt-4o-mini", {"direct"}, False, "image", "supports image output"),
        ("gpt-4o-mini", {"cloud"}, True, None, "under the current pins"),
        ("gpt-4o-mini", {"cloud"}, False, None, "for endpoint 'chat_completions'"),
        ("retired", {"direct"}, False, None, "No active provider for model 'retired'"),
    ],
)
def test_a_model_without_a_row_to_take_is_a_400(model_id, candidates, pinned, modality, message):
    entry = CATALOG.models[model_id]
    with pytest.raises(BadRequest) as refused:
        _model_rows(entry, CHAT, model_id, candidates, pinned, modality)
    assert message in refused.value.message


def test_a_pinned_connection_is_the_route_and_must_carry_the_tags():
    entry = CATALOG.models["gpt-4o-mini"]
    row = ("direct", "gpt-4o-mini")
    route = _pinned_route(CATALOG, CHAT, "gpt-4o-mini", entry, row, "eu", frozenset())
    assert (route.provider.slug, route.connection.name, route.connection_pinned) == (
        "direct",
        "eu",
        True,
    )
    for name, tags in (("missing", frozenset()), ("eu", frozenset({"eu"}))):
        with pytest.raises(BadRequest, match="under the current pins"):
            _pinned_route(CATALOG, CHAT, "gpt-4o-mini", entry, row, name, tags)
    with pytest.raises(ConnectionMisconfigured):
        _pinned_route(CATALOG, CHAT, "gpt-4o-mini", entry, row, "nokey", frozenset())


def test_the_failovers_are_the_rows_other_connections_then_the_later_rows_usable_ones():
    entry = CATALOG.models["gpt-4o-mini"]
    rows = [("second", "x"), ("direct", "gpt-4o-mini"), ("aggregator", "openai/gpt-4o-mini")]
    first_row = [conn(), conn("b")]
    tried = _failovers(CATALOG, CHAT, "gpt-4o-mini", entry, rows, 0, first_row, NO_TAGS, NO_TAGS)
    # direct's `nokey` has no credentials: never a failover.
    assert [(r.provider.slug, r.connection.name, r.upstream_model) for r in tried] == [
        ("second", "b", "x"),
        ("direct", "default", "gpt-4o-mini"),
        ("direct", "eu", "gpt-4o-mini"),
        ("aggregator", "default", "openai/gpt-4o-mini"),
    ]


def test_a_header_only_row_and_a_connection_without_the_tags_are_no_failovers():
    entry = CATALOG.models["gpt-4o-mini"]
    rows = [("second", "x"), ("direct", "gpt-4o-mini"), ("aggregator", "openai/gpt-4o-mini")]
    header_only = frozenset({"aggregator"})
    tried = _failovers(CATALOG, CHAT, "gpt-4o-mini", entry, rows, 0, [conn()], NO_TAGS, header_only)
    assert [(r.provider.slug, r.connection.name) for r in tried] == [
        ("direct", "default"),
        ("direct", "eu"),
    ]
    tried = _failovers(CATALOG, CHAT, "gpt-4o-mini", entry, rows, 0, [conn()], EU, NO_TAGS)
    assert list(tried) == []


def test_the_failovers_are_built_only_when_asked_for():
    entry = CATALOG.models["gpt-4o-mini"]
    rows = [("second", "x"), ("missing", "y")]  # a provider the catalog does not have
    tried = _failovers(CATALOG, CHAT, "gpt-4o-mini", entry, rows, 0, [conn()], NO_TAGS, NO_TAGS)
    with pytest.raises(KeyError):
        next(tried)

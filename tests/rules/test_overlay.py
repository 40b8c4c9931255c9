"""Overlays (licensing.rules.overlay) without a server or a database: what narrows, each widening
with its reason, the effective document (an intersection the compiled policy evaluates
unchanged), hostile documents, and a property: the effective policy never allows a request the
base refuses."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import PolicyDenied
from licensing.rules.overlay import effective_policy, overlay_widenings
from licensing.rules.policy import PolicyDocumentError, compile_policy, validate_policy_document

BASE = {
    "version": 1,
    "services": {
        "chat_completions": {
            "providers": ["direct", "cloud"],
            "params": {
                "model": {"allowed": ["gpt-4o-mini", "gpt-4o"]},
                "max_tokens": {"max": 4000},
                "temperature": {"min": 0, "max": 1.5},
                "user": {"excluded": ["root"]},
                "stop": {"patterns": ["[a-z]+", "[0-9]+"], "max_length": 20},
                "tools": {"forbidden": True},
                "n": {"fixed": 1},
            },
        },
        "embeddings": {},
    },
    "limits": {"holder": {"requests_per_minute": 20}},
    "routing": {"connection_tags": ["eu"]},
}


def test_a_narrowing_overlay_has_no_widenings_and_the_effective_policy_is_the_intersection():
    overlay = {
        "version": 1,
        "services": {
            "chat_completions": {
                "providers": ["direct"],
                "params": {
                    "model": {"allowed": ["gpt-4o-mini"]},
                    "max_tokens": {"max": 1000},
                    "temperature": {"min": 0.2},
                    "user": {"excluded": ["root", "admin"]},
                    "stop": {"patterns": ["[a-z]+"], "max_length": 5},
                    "seed": {"forbidden": True},
                },
            }
        },
        "limits": {"holder": {"requests_per_minute": 5}, "license": {"tokens_per_minute": 900}},
        "routing": {"connection_tags": ["eu", "on-premises"]},
    }
    assert overlay_widenings(BASE, overlay) == []
    effective = effective_policy(BASE, overlay)
    assert effective == {
        "version": 1,
        "services": {
            "chat_completions": {
                "providers": ["direct"],
                "params": {
                    "model": {"allowed": ["gpt-4o-mini"]},
                    "max_tokens": {"max": 1000},
                    "temperature": {"min": 0.2, "max": 1.5},
                    "user": {"excluded": ["root", "admin"]},
                    "stop": {"patterns": ["[a-z]+"], "max_length": 5},
                    "tools": {"forbidden": True},
                    "n": {"fixed": 1},
                    "seed": {"forbidden": True},
                },
            }
        },
        "limits": {"holder": {"requests_per_minute": 5}, "license": {"tokens_per_minute": 900}},
        "routing": {"connection_tags": ["eu", "on-premises"]},
    }
    validate_policy_document(effective)
    policy = compile_policy(effective)
    with pytest.raises(PolicyDenied, match="service 'embeddings' is not enabled"):
        policy.check_request("embeddings", {"model": "text-embedding-3-small"})
    with pytest.raises(PolicyDenied, match=r"'model' must be one of: \[gpt-4o-mini\]"):
        policy.check_request("chat_completions", {"model": "gpt-4o"})
    with pytest.raises(PolicyDenied, match="must be <= 1000"):
        policy.check_request("chat_completions", {"max_completion_tokens": 2000})
    policy.check_request("chat_completions", {"model": "gpt-4o-mini", "max_tokens": 1000})


def test_an_overlay_that_lists_a_service_without_rules_keeps_the_base_rules():
    overlay = {"version": 1, "services": {"chat_completions": {}}}
    assert overlay_widenings(BASE, overlay) == []
    assert effective_policy(BASE, overlay)["services"] == {
        "chat_completions": BASE["services"]["chat_completions"]
    }
    assert effective_policy(BASE, {"version": 1, "services": {}})["services"] == {}


def test_every_widening_is_refused_with_its_reason():
    overlay = {
        "version": 1,
        "services": {
            "image_generation": {},
            "chat_completions": {
                "providers": ["direct", "aggregator"],
                "params": {
                    "model": {"allowed": ["gpt-4o", "gpt-4.1"]},
                    "max_tokens": {"max": 8000},
                    "temperature": {"min": -1},
                    "user": {"excluded": ["guest"]},
                    "stop": {"patterns": ["[a-z]+", ".*"], "max_length": 21},
                    "tools": {"forbidden": False},
                    "n": {"fixed": 2},
                },
            },
        },
        "limits": {"holder": {"requests_per_minute": 21}},
        "routing": {"connection_tags": []},
    }
    assert overlay_widenings(BASE, overlay) == [
        "services.image_generation: not enabled by the license type",
        "services.chat_completions.providers: 'aggregator' is not allowed by the license type",
        "services.chat_completions.params.model.allowed: 'gpt-4.1' is not among the license "
        "type's allowed values",
        "services.chat_completions.params.max_tokens.max: 8000 is above the license type's 4000",
        "services.chat_completions.params.temperature.min: -1 is below the license type's 0",
        "services.chat_completions.params.user.excluded: 'root' is excluded by the license type "
        "and must stay excluded",
        "services.chat_completions.params.stop.max_length: 21 is above the license type's 20",
        "services.chat_completions.params.stop.patterns: '.*' is not among the license type's "
        "patterns",
        "services.chat_completions.params.tools.forbidden: the license type forbids this parameter",
        "services.chat_completions.params.n.fixed: 2 differs from the license type's 1",
        "limits.holder.requests_per_minute: 21 is above the license type's 20",
        "routing.connection_tags: 'eu' is required by the license type and missing",
    ]
    # Even so, what is in force is never wider than the base.
    effective = effective_policy(BASE, overlay)
    assert set(effective["services"]) == {"chat_completions"}
    chat = effective["services"]["chat_completions"]
    assert chat["providers"] == ["direct"]
    assert chat["params"]["model"] == {"allowed": ["gpt-4o"]}
    assert chat["params"]["max_tokens"] == {"max": 4000}
    assert chat["params"]["temperature"] == {"min": 0, "max": 1.5}
    assert chat["params"]["user"] == {"excluded": ["root", "guest"]}
    assert chat["params"]["stop"] == {"patterns": ["[a-z]+"], "max_length": 20}
    assert chat["params"]["tools"] == {"forbidden": True}
    assert chat["params"]["n"] == {"forbidden": True}  # fixed 1 and fixed 2 cannot both hold
    assert effective["limits"] == {"holder": {"requests_per_minute": 20}}
    assert effective["routing"] == {"connection_tags": ["eu"]}


def test_rules_that_cannot_both_hold_forbid_the_parameter():
    base = {"version": 1, "services": {"chat_completions": {"params": {"temperature": {"max": 1}}}}}
    overlay = {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {"temperature": {"min": 1.5}, "model": {"allowed": ["a"]}}
            }
        },
    }
    assert overlay_widenings(base, overlay) == []
    effective = effective_policy(base, overlay)
    assert effective["services"]["chat_completions"]["params"] == {
        "temperature": {"forbidden": True},
        "model": {"allowed": ["a"]},
    }


def test_a_base_without_a_rule_accepts_any_narrowing_and_any_provider_list():
    base = {"version": 1, "services": {"chat_completions": {}}}
    overlay = {
        "version": 1,
        "services": {
            "chat_completions": {"providers": ["direct"], "params": {"max_tokens": {"max": 10}}}
        },
    }
    assert overlay_widenings(base, overlay) == []
    assert effective_policy(base, overlay)["services"]["chat_completions"] == {
        "providers": ["direct"],
        "params": {"max_tokens": {"max": 10}},
    }


@pytest.mark.parametrize(
    "overlay",
    [
        None,
        [],
        "x",
        {"services": {}},
        {"version": 1, "services": []},
        {"version": 1, "services": {"nope": {}}},
        {"version": 1, "services": {"chat_completions": {"params": {"max_tokens": {"max": "9"}}}}},
        {
            "version": 1,
            "services": {"chat_completions": {"params": {"max_tokens": {"max": 1e400}}}},
        },
        {
            "version": 1,
            "services": {"chat_completions": {"params": {"temperature": {"min": float("nan")}}}},
        },
        {"version": 1, "services": {"chat_completions": {"params": {"model": {"allowed": []}}}}},
        {"version": 1, "services": {"chat_completions": {"params": {"stop": {"patterns": ["("]}}}}},
        {"version": 1, "services": {"chat_completions": {"providers": "direct"}}},
        {"version": 1, "services": {"chat_completions": {"params": {"max_tokenz": {"max": 1}}}}},
        {"version": 1, "limits": {"holder": {"requests_per_minute": 2**64}}},
        {"version": 1, "x": 1},
    ],
)
def test_hostile_overlays_are_document_errors(overlay):
    with pytest.raises(PolicyDocumentError) as excinfo:
        overlay_widenings(BASE, overlay)
    assert str(excinfo.value).startswith("overlay: ")
    with pytest.raises(PolicyDocumentError):
        effective_policy(BASE, overlay)
    with pytest.raises(PolicyDocumentError, match="^license type's policy: "):
        overlay_widenings(overlay, BASE)


def test_deep_nesting_huge_lists_and_odd_values_are_handled():
    deep: object = 1
    for _ in range(50_000):
        deep = [deep]
    nested = {"version": 1, "services": {"chat_completions": {"params": {"n": {"fixed": deep}}}}}
    with pytest.raises(PolicyDocumentError):
        overlay_widenings(BASE, nested)
    huge = list(range(200_000))
    base = {"version": 1, "services": {"chat_completions": {"params": {"seed": {"allowed": huge}}}}}
    overlay = {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {
                    "seed": {"allowed": [*huge[:100_000], 2**64, "\x00", "\ud800"]},
                    "metadata": {"allowed": [{"a": [1]}, [1, {"b": None}]]},
                }
            }
        },
    }
    assert overlay_widenings(base, overlay) == [
        f"services.chat_completions.params.seed.allowed: {v} is not among the license type's "
        "allowed values"
        for v in ("18446744073709551616", "'\x00'", "'\ud800'")
    ]
    effective = effective_policy(base, overlay)
    assert effective["services"]["chat_completions"]["params"]["seed"] == {
        "allowed": huge[:100_000]
    }


# The property: whatever the overlay, the effective policy allows no request the base refuses.
_values = st.one_of(
    st.integers(-5, 5), st.sampled_from(["a", "b", "c", "gpt-4o", ""]), st.booleans(), st.none()
)
_numbers = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False))


@st.composite
def _rules(draw):
    rule: dict = {}
    if draw(st.booleans()):
        rule["allowed"] = draw(st.lists(_values, min_size=1, max_size=4))
    if draw(st.booleans()):
        rule["excluded"] = draw(st.lists(_values, min_size=1, max_size=4))
    low, high = draw(st.one_of(st.none(), _numbers)), draw(st.one_of(st.none(), _numbers))
    if low is not None:
        rule["min"] = low
    if high is not None and (low is None or high >= low):
        rule["max"] = high
    if draw(st.integers(0, 5)) == 0:
        rule["fixed"] = draw(_values)
    if draw(st.integers(0, 5)) == 0:
        rule["forbidden"] = draw(st.booleans())
    if draw(st.booleans()):
        rule["max_length"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        rule["patterns"] = draw(st.lists(st.sampled_from(["a", "b+", "[a-c]", ".*"]), min_size=1))
    return rule or {"max_items": draw(st.integers(0, 3))}


@st.composite
def _documents(draw):
    services = {}
    for service in draw(st.sets(st.sampled_from(["chat_completions", "responses"]))):
        config: dict = {}
        if draw(st.booleans()):
            config["providers"] = draw(st.lists(st.sampled_from(["direct", "cloud", "x"])))
        params = draw(st.dictionaries(st.sampled_from(["model", "temperature", "user"]), _rules()))
        if params:
            config["params"] = params
        services[service] = config
    document = {"version": 1, "services": services}
    models = draw(st.dictionaries(st.sampled_from(["text", "all"]), _rules(), max_size=2))
    if models:  # rules on the model of several services at once (licensing.rules.scopes)
        document["models"] = models
    return document


_requests = st.fixed_dictionaries(
    {},
    optional={
        "model": _values,
        "temperature": st.one_of(_numbers, _values),
        "user": st.one_of(_values, st.lists(_values, max_size=3)),
    },
)


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    base=_documents(),
    overlay=_documents(),
    service=st.sampled_from(["chat_completions", "responses"]),
    body=_requests,
)
def test_the_effective_policy_never_allows_what_the_base_refuses(base, overlay, service, body):
    effective = compile_policy(effective_policy(base, overlay))
    try:
        compile_policy(base).check_request(service, body)
    except PolicyDenied:
        with pytest.raises(PolicyDenied):
            effective.check_request(service, body)
    base_providers = (base["services"].get(service) or {}).get("providers")
    if service in effective.services and base_providers is not None:
        assert effective.services[service].providers <= frozenset(base_providers)
    if not overlay_widenings(base, overlay):
        # An overlay that only narrows: what it refuses, the effective policy refuses too.
        try:
            compile_policy(overlay).check_request(service, body)
        except PolicyDenied:
            with pytest.raises(PolicyDenied):
                effective.check_request(service, body)


def test_forbidden_false_alone_in_an_overlay_gives_a_valid_document():
    base = {"version": 1, "services": {"chat_completions": {}}}
    overlay = {
        "version": 1,
        "services": {"chat_completions": {"params": {"temperature": {"forbidden": False}}}},
    }
    assert overlay_widenings(base, overlay) == []
    assert effective_policy(base, overlay)["services"]["chat_completions"] == {
        "params": {"temperature": {"forbidden": False}}
    }

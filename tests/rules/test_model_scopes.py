"""Model rules for several services at once (licensing.rules.scopes, a policy document's
`models`), without a server or a database: what the document may write, the rules conjoined
exactly (a property: a request passes the compiled document exactly when it passes every rule
in force on its own), documents without `models` unchanged, the text services' split, and
course overlays (they may only narrow). Through /v1: tests/api/test_model_scopes.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.registry import POLICY_SERVICES, TEXT_SERVICES
from core.errors import PolicyDenied
from licensing.rules.overlay import effective_policy, overlay_widenings
from licensing.rules.policy import PolicyDocumentError, compile_policy
from licensing.rules.scopes import (
    NOTHING_PASSES,
    SCOPES,
    conjoin,
    model_rule_in_force,
    model_rules,
    scopes_of,
    text_split,
)

from .test_overlay import _rules, _values

MINI, BIG = "gpt-4o-mini", "gpt-4.1"


def _doc(models=None, **services) -> dict:
    document: dict = {"version": 1, "services": services or {s: {} for s in TEXT_SERVICES}}
    if models is not None:
        document["models"] = models
    return document


def _passes(policy, service: str, body: dict) -> bool:
    try:
        policy.check_request(service, body)
    except PolicyDenied:
        return False
    return True


def test_the_scopes_and_the_services_they_hold_for():
    assert SCOPES == {"text": ("chat_completions", "responses"), "all": POLICY_SERVICES}
    assert scopes_of("responses") == ("text", "all")
    assert scopes_of("embeddings") == ("all",)


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ([], "'models' must be an object"),
        ({"chat": {"allowed": [MINI]}}, r"models: unknown keys \['chat'\]; use \['text', 'all'\]"),
        ({"text": {}}, "models.text: a rule must be a non-empty object"),
        ({"text": {"allowed": []}}, "models.text.allowed: must be a non-empty list"),
        ({"all": {"allowd": [MINI]}}, r"models.all: unknown rule keys \['allowd'\]"),
        ({"all": {"patterns": ["("]}}, "models.all.patterns: '\\(': "),
        ({"text": None}, "models.text: a rule must be a non-empty object"),
    ],
)
def test_what_models_may_hold(models, message):
    with pytest.raises(PolicyDocumentError, match=f"^{message}"):
        compile_policy(_doc(models))


def test_a_text_rule_holds_for_chat_and_responses_and_not_for_the_others():
    policy = compile_policy(
        _doc({"text": {"allowed": [MINI]}}, chat_completions={}, responses={}, embeddings={})
    )
    for service in TEXT_SERVICES:
        with pytest.raises(PolicyDenied, match=r"^'model' must be one of: \[gpt-4o-mini\]$"):
            policy.check_request(service, {"model": BIG})
        policy.check_request(service, {"model": MINI})
    policy.check_request("embeddings", {"model": "text-embedding-3-small"})


def test_the_403_lists_exactly_the_models_every_rule_allows():
    document = _doc(
        {"text": {"allowed": [MINI, "gpt-4o", BIG]}, "all": {"allowed": ["gpt-4o", MINI, "x"]}},
        chat_completions={"params": {"model": {"allowed": ["gpt-4o", BIG]}}},
        responses={},
    )
    policy = compile_policy(document)
    with pytest.raises(PolicyDenied, match=r"'model' must be one of: \[gpt-4o\]$"):
        policy.check_request("chat_completions", {"model": MINI})
    with pytest.raises(PolicyDenied, match=r"'model' must be one of: \[gpt-4o, gpt-4o-mini\]$"):
        policy.check_request("responses", {"model": BIG})
    # No model passes both: the parameter is forbidden, with the rule's own message.
    policy = compile_policy(
        _doc(
            {"text": {"allowed": [MINI]}},
            chat_completions={"params": {"model": {"allowed": [BIG]}}},
        )
    )
    with pytest.raises(PolicyDenied, match="parameter 'model' is not permitted for this license"):
        policy.check_request("chat_completions", {"model": BIG})


def test_conjoin_merges_what_is_exact_and_keeps_a_second_patterns_list_apart():
    assert conjoin([]) == []
    assert conjoin([{"allowed": ["a", "b"]}, {"allowed": ["b", "c"], "excluded": ["x"]}]) == [
        {"allowed": ["b"], "excluded": ["x"]}
    ]
    assert conjoin([{"patterns": ["a.*"]}, {"patterns": [".*z"], "max_length": 3}]) == [
        {"patterns": ["a.*"], "max_length": 3},
        {"patterns": [".*z"]},
    ]
    assert conjoin([{"patterns": ["a.*"]}, {"patterns": ["a.*"]}]) == [{"patterns": ["a.*"]}]
    # A minimum above a maximum refuses numbers only: the second rule stays apart.
    assert conjoin([{"min": 5}, {"max": 3}]) == [{"min": 5}, {"max": 3}]
    assert conjoin([{"allowed": ["a"]}, {"allowed": ["b"]}, {"patterns": ["x"]}]) == [
        NOTHING_PASSES
    ]


def test_the_rule_in_force_of_a_service():
    document = _doc(
        {"text": {"allowed": [MINI, BIG]}, "all": {"excluded": [BIG]}},
        chat_completions={"params": {"model": {"allowed": [BIG, MINI, "o3"]}}},
        responses={},
    )
    assert model_rules(document, "chat_completions") == [
        {"allowed": [BIG, MINI, "o3"]},
        {"allowed": [MINI, BIG]},
        {"excluded": [BIG]},
    ]
    assert model_rule_in_force(document, "chat_completions") == {
        "allowed": [MINI, BIG],
        "excluded": [BIG],
    }
    assert model_rule_in_force(document, "embeddings") == {"excluded": [BIG]}
    assert model_rule_in_force({"version": 1}, "embeddings") == {}


@pytest.mark.parametrize(
    "document",
    [
        _doc(),
        _doc(chat_completions={"params": {"model": {"allowed": [MINI]}, "n": {"fixed": 1}}}),
        _doc(responses={"params": {"max_output_tokens": {"max": 9}, "model": {"patterns": ["a"]}}}),
    ],
)
def test_a_document_without_models_compiles_as_before(document):
    """No `models`: the service's rules stay as they are written, in their order."""
    policy = compile_policy(document)
    for service, config in document["services"].items():
        params = (config or {}).get("params", {})
        compiled = policy.services[service].rules
        assert [rule.name for rule in compiled] == list(params)
        assert [dict(rule.values) for rule in compiled] == [
            {k: tuple(v) if isinstance(v, list) and k != "patterns" else v for k, v in spec.items()}
            if "patterns" not in spec
            else dict(rule.values)
            for rule, spec in zip(compiled, params.values(), strict=True)
        ]


@st.composite
def _scoped(draw):
    """A document with a rule of its own on chat's model and `models` rules."""
    document = _doc(chat_completions={}, responses={})
    if draw(st.booleans()):
        document["services"]["chat_completions"] = {"params": {"model": draw(_rules())}}
    models = draw(st.dictionaries(st.sampled_from(["text", "all"]), _rules(), max_size=2))
    if models:
        document["models"] = models
    return document


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(document=_scoped(), model=_values)
def test_the_compiled_document_passes_exactly_what_every_rule_in_force_passes(document, model):
    try:
        policy = compile_policy(document)
    except PolicyDocumentError:
        return  # a drawn rule that is no rule (min above max): refused as a whole
    for service in TEXT_SERVICES:
        alone = [
            compile_policy(_doc(**{service: {"params": {"model": rule}}}))
            for rule in model_rules(document, service)
        ]
        every = all(_passes(p, service, {"model": model}) for p in alone)
        assert _passes(policy, service, {"model": model}) == every


def test_the_text_services_split():
    assert text_split(_doc()) is None
    assert text_split(_doc({"text": {"allowed": [MINI]}})) is None
    assert text_split(_doc(chat_completions={"params": {"model": {"allowed": [MINI]}}})) is None
    split = _doc(chat_completions={"params": {"model": {"allowed": [MINI]}}}, responses={})
    assert text_split(split) == ([{"allowed": [MINI]}], [])
    # The same models in another order, or a text rule that leaves both alike: no split.
    assert (
        text_split(
            _doc(
                chat_completions={"params": {"model": {"allowed": [MINI, BIG]}}},
                responses={"params": {"model": {"allowed": [BIG, MINI]}}},
            )
        )
        is None
    )
    assert (
        text_split(
            _doc(
                {"text": {"allowed": [MINI]}},
                chat_completions={"params": {"model": {"allowed": [MINI, BIG]}}},
                responses={},
            )
        )
        is None
    )


def test_an_overlay_may_narrow_with_models_and_never_widen():
    base = _doc({"text": {"allowed": [MINI, "gpt-4o"]}}, chat_completions={}, responses={})
    narrower = {
        "version": 1,
        "models": {"text": {"allowed": [MINI]}},
        "services": {"responses": {}},
    }
    assert overlay_widenings(base, narrower) == []
    effective = effective_policy(base, narrower)
    assert effective == {
        "version": 1,
        "models": {"text": {"allowed": [MINI]}},
        "services": {"responses": {}},
    }
    policy = compile_policy(effective)
    with pytest.raises(PolicyDenied, match=r"must be one of: \[gpt-4o-mini\]"):
        policy.check_request("responses", {"model": "gpt-4o"})
    # The base's `models.text` holds for chat: an overlay's own chat list is compared with it,
    # and so is an overlay's `models` rule.
    wider = {
        "version": 1,
        "models": {"all": {"allowed": [BIG, MINI]}},
        "services": {"chat_completions": {"params": {"model": {"allowed": [BIG]}}}},
    }
    assert overlay_widenings(base, wider) == [
        "services.chat_completions.params.model.allowed: 'gpt-4.1' is not among the license "
        "type's allowed values",
        "models.all.allowed: 'gpt-4.1' is not among the license type's allowed values",
    ]
    # Whatever it says, the document in force never lets gpt-4.1 through.
    policy = compile_policy(effective_policy(base, wider))
    with pytest.raises(PolicyDenied):
        policy.check_request("chat_completions", {"model": BIG})
    # An overlay's `models` rule under a base without one narrows whatever it says.
    assert overlay_widenings(_doc(), {"version": 1, "models": {"all": {"allowed": ["x"]}}}) == []

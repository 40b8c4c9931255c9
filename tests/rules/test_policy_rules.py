"""Policy rules (licensing.rules.policy) without a server or a database: each rule key's check and
its exact 403 message, the aliases, values in lists, fields left out, and a document's compile
errors. The 403 body through the API is tests/api/test_embeddings.py's `test_parameter_rules`
(one table of rules, end to end); rule names against the request schemas and the editor are
tests/rules/test_policy_editor.py."""

from __future__ import annotations

import pytest

from core.errors import PolicyDenied, ServiceUnavailable
from licensing.rules.policy import (
    SERVICES,
    PolicyDocumentError,
    compile_policy,
    load_policy,
    open_policy_document,
)


def policy(params: dict, service: str = "chat_completions"):
    return compile_policy({"version": 1, "services": {service: {"params": params}}})


def denied(params: dict, body: dict, service: str = "chat_completions") -> tuple[str, str | None]:
    with pytest.raises(PolicyDenied) as refused:
        policy(params, service).check_request(service, body)
    assert refused.value.status == 403
    return refused.value.message, refused.value.param


@pytest.mark.parametrize(
    ("rule", "value", "message"),
    [
        ({"forbidden": True}, "x", "parameter 'f' is not permitted for this license"),
        ({"fixed": "a"}, "b", "'f' must be 'a'"),
        ({"fixed": True}, False, "'f' must be 'true'"),
        ({"allowed": ["a", "b"]}, "c", "'f' must be one of: [a, b]"),
        ({"allowed": ["a", "b"]}, ["a", "c"], "'f' must be one of: [a, b]"),
        ({"excluded": ["x"]}, "x", "'f' value 'x' is not permitted for this license"),
        ({"excluded": ["x"]}, ["a", "x"], "'f' value 'x' is not permitted for this license"),
        ({"min": 1}, 0, "'f' must be >= 1"),
        ({"max": 1.5}, 2, "'f' must be <= 1.5"),
        ({"min": 1, "max": 5}, 6, "'f' must be between 1 and 5"),
        ({"max": 5}, [1, 9], "'f' must be <= 5"),
        ({"max_length": 3}, "long", "'f' exceeds maximum length of 3"),
        ({"max_length": 3}, ["ok", "long"], "'f' exceeds maximum length of 3"),
        ({"max_items": 2}, [1, 2, 3], "'f' exceeds maximum item count of 2"),
        ({"max_items": 1}, {"a": 1, "b": 2}, "'f' exceeds maximum item count of 1"),
        (
            {"patterns": ["stu-[0-9]+"]},
            "stu-7x",
            "'f' value 'stu-7x' does not match any allowed pattern",
        ),
    ],
)
def test_each_rule_key_refuses_with_its_message(rule, value, message):
    assert denied({"f": rule}, {"f": value}) == (message, "f")


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        ({"forbidden": True}, None),  # a field left out is not checked
        ({"fixed": "a"}, "a"),
        ({"allowed": ["a", "b"]}, ["a", "b"]),
        ({"excluded": ["x"]}, "y"),
        ({"min": 1, "max": 5}, 5),
        ({"max": 5}, "not a number"),  # ranges apply to numbers only
        ({"max": 5}, True),
        ({"max_length": 3}, "abc"),
        ({"max_items": 2}, "one scalar"),
        ({"patterns": ["a+", "b+"]}, ["aa", "bbb"]),  # the whole value must match
    ],
)
def test_values_that_pass(rule, value):
    policy({"f": rule}).check_request("chat_completions", {"f": value} if value is not None else {})


def test_aliases_cover_the_other_spelling():
    rules = {"max_tokens": {"max": 100}, "reasoning_effort": {"allowed": ["low"]}}
    assert denied(rules, {"max_completion_tokens": 101}) == (
        "'max_completion_tokens' must be <= 100",
        "max_completion_tokens",
    )
    assert denied(rules, {"reasoning": {"effort": "high"}}) == (
        "'reasoning.effort' must be one of: [low]",
        "reasoning.effort",
    )


def test_the_first_broken_rule_is_the_answer():
    rules = {"a": {"max": 1}, "b": {"forbidden": True}}
    assert denied(rules, {"a": 2, "b": 1}) == ("'a' must be <= 1", "a")


def test_a_service_not_listed_is_not_enabled():
    compiled = policy({})
    with pytest.raises(PolicyDenied) as refused:
        compiled.check_request("embeddings", {})
    assert (refused.value.message, refused.value.param) == (
        "service 'embeddings' is not enabled for this license",
        None,
    )


def test_providers_and_the_open_document():
    compiled = compile_policy(
        {"version": 1, "services": {"embeddings": {"providers": ["direct"]}, "responses": None}}
    )
    assert compiled.service("embeddings").providers == frozenset({"direct"})
    assert compiled.service("responses").providers is None
    opened = compile_policy(open_policy_document())
    assert set(opened.services) == set(SERVICES)
    assert all(s.providers is None and s.rules == () for s in opened.services.values())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "The policy must be a JSON object"),
        ({"version": 2}, "Unsupported policy version 2; supported: [1]"),
        ({"version": 1, "extra": 1}, "Unknown top-level keys ['extra']"),
        ({"version": 1, "services": []}, "'services' must be an object"),
        ({"version": 1, "services": {"telepathy": {}}}, "Unknown service 'telepathy'"),
        ({"version": 1, "services": {"embeddings": 1}}, "services.embeddings: must be an object"),
        (
            {"version": 1, "services": {"embeddings": {"models": []}}},
            "services.embeddings: unknown keys ['models']",
        ),
        (
            {"version": 1, "services": {"embeddings": {"providers": "direct"}}},
            "services.embeddings.providers: must be a list of slugs",
        ),
        (
            {"version": 1, "services": {"embeddings": {"params": []}}},
            "services.embeddings.params: must be an object",
        ),
    ],
)
def test_document_errors(document, message):
    with pytest.raises(PolicyDocumentError) as refused:
        compile_policy(document)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({}, "services.embeddings.params.f: a rule must be a non-empty object"),
        ({"maximum": 1}, "services.embeddings.params.f: unknown rule keys ['maximum']"),
        ({"forbidden": "yes"}, "services.embeddings.params.f.forbidden: must be true or false"),
        ({"allowed": []}, "services.embeddings.params.f.allowed: must be a non-empty list"),
        ({"excluded": "x"}, "services.embeddings.params.f.excluded: must be a non-empty list"),
        ({"min": "1"}, "services.embeddings.params.f.min: must be a number"),
        ({"max": True}, "services.embeddings.params.f.max: must be a number"),
        ({"min": 5, "max": 1}, "services.embeddings.params.f: min is greater than max"),
        (
            {"max_length": -1},
            "services.embeddings.params.f.max_length: must be a whole number >= 0",
        ),
        ({"max_items": 1.5}, "services.embeddings.params.f.max_items: must be a whole number >= 0"),
        (
            {"patterns": []},
            "services.embeddings.params.f.patterns: must be a non-empty list of regexes",
        ),
        (
            {"patterns": [1]},
            "services.embeddings.params.f.patterns: every pattern must be a string",
        ),
        ({"patterns": ["("]}, "services.embeddings.params.f.patterns: '('"),
    ],
)
def test_rule_errors_name_their_path(rule, message):
    with pytest.raises(PolicyDocumentError) as refused:
        policy({"f": rule}, "embeddings")
    assert str(refused.value).startswith(message)


def test_a_document_the_api_cannot_evaluate_is_503():
    with pytest.raises(ServiceUnavailable):
        load_policy({"version": 9})
    assert load_policy(open_policy_document()).limits is None


def test_compile_policy_steps_alone():
    """compile_policy's steps (licensing.rules.policy): the top level, then one service (with
    the document's `models` rules that hold for it)."""
    from licensing.rules.policy import _check_top_level, _compile_service

    _check_top_level({"version": 1, "services": {}, "limits": None, "routing": None})
    with pytest.raises(PolicyDocumentError, match=r"^Unknown top-level keys \['x'\]"):
        _check_top_level({"version": 1, "x": 1})
    config = {"providers": ["direct"], "params": {"f": {"max": 2}}}
    service = _compile_service("embeddings", config, {})
    assert service.providers == frozenset({"direct"})
    (rule,) = service.rules
    assert (rule.name, rule.max, len(rule.checks)) == ("f", 2, 1)
    assert _compile_service("embeddings", None, {}) == _compile_service("embeddings", {}, {})
    with pytest.raises(PolicyDocumentError, match="^Unknown service 'telepathy'"):
        _compile_service("telepathy", {}, {})
    # `models.all` holds for embeddings (first, the service having no model rule of its own),
    # `models.text` does not.
    document = {"models": {"all": {"allowed": ["a", "b"]}, "text": {"allowed": ["c"]}}}
    model, rule = _compile_service("embeddings", config, document).rules
    assert (model.name, model.allowed, rule.name) == ("model", ("a", "b"), "f")

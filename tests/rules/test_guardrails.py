"""Guardrail configurations (licensing.rules.guardrails) without a server or a database: what
compiles, each stage's errors with its path, and the moderation switch per stage. The blocks
through the API are tests/api/test_chat.py's and test_embeddings.py's; moderation is
tests/rules/test_moderation.py."""

from __future__ import annotations

import pytest

from core.errors import BadRequest
from licensing.rules.guardrails import (
    NO_GUARDRAILS,
    GuardrailConfigError,
    _compile_stage,
    compile_guardrails,
)


def test_an_empty_configuration_is_no_guardrails():
    assert compile_guardrails(None) is NO_GUARDRAILS
    assert compile_guardrails({}) is NO_GUARDRAILS
    assert compile_guardrails([]) is NO_GUARDRAILS  # empty, whatever its type
    assert compile_guardrails({"input": []}) == compile_guardrails({"input": {}})


def test_each_stage_compiles_its_patterns_and_its_moderation():
    guardrails = compile_guardrails(
        {"input": {"patterns": ["(?i)secret"], "moderation": True}, "output": {"patterns": ["x"]}}
    )
    assert [p.pattern for p in guardrails.input] == ["(?i)secret"]
    assert [p.pattern for p in guardrails.output] == ["x"]
    assert guardrails.moderates("input") and not guardrails.moderates("output")
    with pytest.raises(BadRequest):
        guardrails.check("input", ["a SECRET"])
    guardrails.check("input", ["fine", ""])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("x", "Guardrails must be a JSON object"),
        ({"middle": {}}, "Unknown guardrail stages ['middle']; use ['input', 'output']"),
        ({"input": ["x"]}, "input: must be an object"),
        ({"output": {"regex": []}}, "output: unknown keys ['regex']"),
        ({"input": {"moderation": "yes"}}, "input.moderation: must be true or false"),
        ({"input": {"patterns": "x"}}, "input.patterns: must be a list of regexes"),
        ({"output": {"patterns": [1]}}, "output.patterns: must be a list of regexes"),
        ({"input": {"patterns": ["("]}}, "input.patterns: missing ),"),
    ],
)
def test_configuration_errors_name_their_stage(config, message):
    with pytest.raises(GuardrailConfigError) as refused:
        compile_guardrails(config)
    assert str(refused.value).startswith(message)


def test_a_stage_alone():
    patterns, moderation = _compile_stage("output", {"patterns": ["a+", "b"]})
    assert [p.pattern for p in patterns] == ["a+", "b"] and moderation is False
    assert _compile_stage("input", {"moderation": True}) == ((), True)
    with pytest.raises(GuardrailConfigError, match="^input: must be an object"):
        _compile_stage("input", "x")

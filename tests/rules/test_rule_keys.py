"""The rule keys' table (licensing.rules.keys.RULES) without a server or a database: every key
implements every part (compilation, its check, an overlay's widening check, the intersection),
every key an overlay writes is honoured by the effective policy (none is dropped), and the
compiled rule's readers (the portal, the fetcher) still read each key's value.

A new rule key fails `test_every_key_has_an_example` until it has its line in EXAMPLES below,
and then every test here runs on it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from core.errors import PolicyDenied
from licensing.rules.keys import IMPOSSIBLE, MISSING, RULES, RuleKey
from licensing.rules.overlay import effective_policy, overlay_widenings
from licensing.rules.policy import RULE_KEYS, compile_policy

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "chat_completions"

# key -> (a parameter of chat completions, the base's value, a narrower overlay value, a wider
# overlay value (None: the key has none wider but a different one), a request value the narrower
# value refuses and no rule-less base does).
EXAMPLES = {
    "forbidden": ("seed", True, True, False, 7),
    "fixed": ("n", 1, 1, 2, 2),
    "allowed": ("user", ["a", "b"], ["a"], ["a", "c"], "b"),
    "excluded": ("user", ["x"], ["x", "y"], ["y"], "y"),
    "min": ("temperature", 0, 0.5, -1, 0.2),
    "max": ("temperature", 1.5, 1, 2, 1.2),
    "max_length": ("user", 10, 3, 20, "abcd"),
    "max_items": ("stop", 4, 1, 5, ["a", "b"]),
    "patterns": ("user", ["s[0-9]+", "t[0-9]+"], ["s[0-9]+"], ["s[0-9]+", ".*"], "t1"),
}
PARTS = ("compile", "bind", "widenings", "intersect")


def _document(params: dict) -> dict:
    return {"version": 1, "services": {SERVICE: {"params": params} if params else {}}}


def test_every_key_has_an_example():
    assert set(EXAMPLES) == set(RULES)
    assert RULE_KEYS == tuple(RULES)


@pytest.mark.parametrize("key", RULES)
def test_every_key_implements_every_part(key):
    kind = RULES[key]
    assert kind.name == key
    for part in PARTS:
        # Its own (or a shared bound's), never RuleKey's abstract one.
        assert getattr(type(kind), part) is not getattr(RuleKey, part), part
        assert not getattr(getattr(type(kind), part), "__isabstractmethod__", False), part
    assert not inspect.isabstract(type(kind))


def test_a_key_that_misses_a_part_cannot_join_the_table():
    class Half(RuleKey):
        name = "half"

        def compile(self, value, where, earlier):
            return value

    with pytest.raises(TypeError):
        Half()  # type: ignore[abstract]


@pytest.mark.parametrize("key", RULES)
def test_each_key_compiles_and_checks(key):
    param, _base, narrow, _wide, refused = EXAMPLES[key]
    policy = compile_policy(_document({param: {key: narrow}}))
    with pytest.raises(PolicyDenied) as denied:
        policy.check_request(SERVICE, {param: refused})
    assert denied.value.param == param
    policy.check_request(SERVICE, {})  # a field the request leaves out is not checked


def test_an_overlay_with_every_key_is_honoured():
    """Each key on a base with no rule: the effective policy keeps every key the overlay writes,
    and refuses what each key refuses."""
    for key, (param, _base, narrow, _wide, refused) in EXAMPLES.items():
        overlay = _document({param: {key: narrow}})
        assert overlay_widenings(_document({}), overlay) == [], key
        effective = effective_policy(_document({}), overlay)
        assert effective["services"][SERVICE]["params"][param] == {key: narrow}, key
        with pytest.raises(PolicyDenied):
            compile_policy(effective).check_request(SERVICE, {param: refused})


@pytest.mark.parametrize("key", RULES)
def test_each_key_narrows_and_widens(key):
    param, base, narrow, wide, _refused = EXAMPLES[key]
    base_document = _document({param: {key: base}})
    assert overlay_widenings(base_document, _document({param: {key: narrow}})) == []
    effective = effective_policy(base_document, _document({param: {key: narrow}}))
    assert effective["services"][SERVICE]["params"][param] == {key: narrow}
    reasons = overlay_widenings(base_document, _document({param: {key: wide}}))
    assert reasons, key
    assert all(r.startswith(f"services.{SERVICE}.params.{param}.{key}: ") for r in reasons)


@pytest.mark.parametrize("key", RULES)
def test_intersect_keeps_the_narrower_value_whichever_side_writes_it(key):
    _param, base, narrow, wide, _refused = EXAMPLES[key]
    kind = RULES[key]
    assert kind.intersect(MISSING, narrow) == narrow
    assert kind.intersect(base, narrow) == narrow
    found = kind.intersect(narrow, wide)
    # The wider overlay never widens: the narrower value, or nothing passes.
    assert found is IMPOSSIBLE or kind.widenings("w", narrow, found) == []


def test_intersections_that_cannot_hold():
    assert RULES["fixed"].intersect(1, 2) is IMPOSSIBLE
    assert RULES["allowed"].intersect(["a"], ["b"]) is IMPOSSIBLE
    assert RULES["patterns"].intersect(["a"], ["b"]) is IMPOSSIBLE
    assert RULES["max"].contradicts({"min": 2, "max": 1})
    assert not RULES["max"].contradicts({"min": 1, "max": 1})
    assert not any(RULES[k].contradicts({"min": 2, "max": 1}) for k in RULES if k != "max")
    base = _document({"temperature": {"max": 1}})
    effective = effective_policy(base, _document({"temperature": {"min": 1.5}}))
    assert effective["services"][SERVICE]["params"]["temperature"] == {"forbidden": True}


def test_min_and_max_are_one_check_bound_once():
    rule = compile_policy(_document({"temperature": {"min": 0, "max": 1}})).services[SERVICE]
    (compiled,) = rule.rules
    assert len(compiled.checks) == 1  # Min's range check covers Max
    with pytest.raises(PolicyDenied, match="must be between 0 and 1"):
        compiled.check("temperature", 2)
    forbidden_false = compile_policy(_document({"seed": {"forbidden": False}}))
    assert forbidden_false.services[SERVICE].rules[0].checks == ()


def test_the_compiled_rule_reads_each_key_by_name():
    document = _document(
        {
            "model": {"allowed": ["a"], "patterns": ["a.*"], "excluded": ["b"]},
            "max_tokens": {"max": 9},
        }
    )
    model, max_tokens = compile_policy(document).services[SERVICE].rules
    assert (model.allowed, model.excluded) == (("a",), ("b",))
    assert [p.pattern for p in model.patterns] == ["a.*"]
    assert (model.forbidden, model.fixed, model.max) == (False, None, None)  # unset
    assert max_tokens.max == 9
    assert max_tokens.fields == (("max_tokens", False), ("max_completion_tokens", False))
    with pytest.raises(AttributeError):
        model.maximum  # noqa: B018


def test_the_docs_list_every_key():
    text = (ROOT / "docs" / "policy.md").read_text()
    table = text.split("## Rule keys and the exact 403 answers", 1)[1].split("\n## ", 1)[0]
    for key in RULES:
        assert f"`{key}`" in table, key

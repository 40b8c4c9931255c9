"""core.text: the one definition of text a column can hold, which every site that stores or
queries a string reads (their own messages and limits are tested at each site)."""

import pytest

from core.text import SURROGATE, is_storable_json, is_storable_text, json_holds


@pytest.mark.parametrize("text", ["", "plain", "é ü 漢字 🙂", "\x01\x1f tab\t", "\ud7ff\ue000"])
def test_text_a_column_holds(text):
    assert is_storable_text(text)


@pytest.mark.parametrize("text", ["\x00", "a\x00b", "\ud800", "x\udfff", "\udc00\ud800"])
def test_nul_and_lone_surrogates_are_not(text):
    assert not is_storable_text(text)


@pytest.mark.parametrize(
    "value",
    [{"k": ["a", {"b": "c\x00"}]}, {"\ud800": 1}, ["ok", ["\udfff"]], "\x00"],
)
def test_a_json_value_with_one_bad_string_anywhere_is_not_storable(value):
    assert not is_storable_json(value)


def test_a_json_value_of_good_strings_numbers_and_nulls_is():
    assert is_storable_json({"a": [1, 2.5, None, True, {"b": "c"}], "d": ""})


def nested(levels: int):
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_the_depth_bound_counts_the_top_value_as_depth_0():
    # 32 lists around a string: the string is at depth 32.
    assert is_storable_json(nested(32), max_depth=32)
    assert not is_storable_json(nested(33), max_depth=32)
    assert is_storable_json(nested(5_000))  # no bound, and no recursion to exhaust


def test_any_pattern_can_be_looked_for():
    assert json_holds({"a": ["x\ud800"]}, SURROGATE)
    assert not json_holds({"a": ["x\x00"]}, SURROGATE)

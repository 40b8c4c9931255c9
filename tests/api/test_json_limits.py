"""core.jsonio's slow path, without a server: which token breaks which limit, and where."""

from __future__ import annotations

import json

import pytest

from core.jsonio import MAX_DEPTH, MAX_INT_DIGITS, _problem, _scalar_problem


@pytest.mark.parametrize(
    "token",
    ['"plain"', '"\\ud83d\\ude00"', '"\\\\ud800"', "-12", "1.5", "1e300", "9" * MAX_INT_DIGITS],
)
def test_a_token_within_the_limits_is_no_problem(token):
    assert _scalar_problem(token, token, 0) is None


@pytest.mark.parametrize(
    ("token", "message", "offset"),
    [
        ('"ab\\ud800"', "Lone surrogate in string", 3),
        ('"\\udc00"', "Lone surrogate in string", 1),
        ("-" + "9" * (MAX_INT_DIGITS + 1), "Number too large", 0),
        ("1e400", "Number out of range", 0),
    ],
)
def test_a_broken_token_names_its_limit_at_its_offset_in_the_text(token, message, offset):
    text = "[1, " + token + "]"
    problem = _scalar_problem(token, text, 4)
    assert isinstance(problem, json.JSONDecodeError)
    assert (problem.msg, problem.pos, problem.doc) == (message, 4 + offset, text)


def test_the_first_problem_of_a_body_wins():
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    problem = _problem('{"a": 1e400, "b": ' + deep + "}")
    assert problem is not None and (problem.msg, problem.pos) == ("Number out of range", 6)
    problem = _problem(deep)
    assert problem is not None
    assert (problem.msg, problem.pos) == (f"Nesting deeper than {MAX_DEPTH} levels", MAX_DEPTH)
    assert _problem('{"a": [1, 2.5, "x"]}') is None

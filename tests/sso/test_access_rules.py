"""The access-rule language (licensing.rules.access): decide, the rules' shape, the
attributes' normalisation and hostile values; validate_rules' institution scoping."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from licensing.access.services import license_create
from licensing.rules.access import (
    NO_ACCESS,
    AttributesRefused,
    check_rules,
    decide,
    normalise_claims,
    rules_from_groups,
)
from licensing.signin.access_rules import validate_rules

PRIMARY = {
    "when": [
        {"attribute": "eduPersonAffiliation", "contains": "student"},
        {"attribute": "age_group", "is": "u13"},
    ],
    "role": "student",
    "license": 7,
    "courses": [3],
}
SECONDARY = {
    "when": [{"attribute": "eduPersonAffiliation", "contains": "student"}],
    "role": "student",
    "license": 8,
}
STAFF = {"when": [{"attribute": "groups", "any_of": ["t", "teachers"]}], "role": "teacher"}


def test_first_match_wins():
    rules = check_rules([PRIMARY, SECONDARY, STAFF])
    pupil = {"eduPersonAffiliation": ["student", "member"], "age_group": ["u13"]}
    decision = decide(rules, pupil)
    assert (decision.role, decision.license_id, decision.course_ids) == ("student", 7, (3,))
    assert decision.rule_index == 0
    older = decide(rules, {"eduPersonAffiliation": ["student"], "age_group": ["u18"]})
    assert (older.license_id, older.rule_index) == (8, 1)
    assert decide(rules, {"groups": ["teachers"]}).role == "teacher"
    assert decide(rules, {"groups": ["Teachers"]}) == NO_ACCESS  # exact, case-sensitive


def test_is_means_exactly_one_value_and_present():
    rules = check_rules(
        [
            {"when": [{"attribute": "a", "is": "x"}], "role": "teacher"},
            {"when": [{"attribute": "b", "present": True}], "role": "reviewer"},
            {"when": [{"attribute": "b", "present": False}], "role": None},
        ]
    )
    assert decide(rules, {"a": ["x"]}).role == "teacher"
    assert decide(rules, {"a": ["x", "y"], "b": ["1"]}).role == "reviewer"
    no = decide(rules, {"a": ["x", "y"]})
    assert (no.role, no.rule_index) == (None, 2)


def test_empty_when_is_a_catch_all_and_no_rules_no_access():
    rules = check_rules([{"when": [], "role": "student", "license": 1}])
    assert decide(rules, {}).license_id == 1
    assert decide([], {"groups": ["x"]}) == NO_ACCESS


@pytest.mark.parametrize(
    "bad",
    [
        "not a list",
        [{"role": "root"}],
        [{"role": "student"}],  # a student needs a license
        [{"role": None, "license": 3}],
        [{"when": [{"attribute": "a"}], "role": "teacher"}],
        [{"when": [{"attribute": "a", "is": "x", "contains": "y"}], "role": "teacher"}],
        [{"when": [{"attribute": "a\x00", "is": "x"}], "role": "teacher"}],
        [{"when": [{"attribute": "a", "is": "\ud800"}], "role": "teacher"}],
        [{"when": [{"attribute": "a", "any_of": []}], "role": "teacher"}],
        [{"when": [{"attribute": "a", "any_of": ["x"] * 201}], "role": "teacher"}],
        [{"when": [{"attribute": "a", "present": "yes"}], "role": "teacher"}],
        [{"role": "teacher", "license": 2**64}],
        [{"role": "teacher", "license": True}],
        [{"role": "teacher", "license": 1e400}],
        [{"role": "teacher", "courses": [-1]}],
        [{"role": "teacher", "extra": 1}],
        [{"role": "teacher"}] * 101,
    ],
)
def test_bad_rules_refused(bad):
    with pytest.raises(ValidationError):
        check_rules(bad)


def test_normalise_claims_shapes():
    got = normalise_claims(
        {
            "groups": ["a", "b"],
            "mail": "x@y",
            "email_verified": True,
            "iat": 5,
            "nothing": None,
            "https://purl.imsglobal.org/spec/lti/claim/custom": {"age_group": "u13"},
        }
    )
    assert got["groups"] == ["a", "b"] and got["mail"] == ["x@y"]
    assert got["email_verified"] == ["true"] and got["iat"] == ["5"] and got["nothing"] == []
    assert got["https://purl.imsglobal.org/spec/lti/claim/custom.age_group"] == ["u13"]


@pytest.mark.parametrize(
    "value",
    [
        "a\x00b",
        "\udc00",
        ["ok", {"nested": 1}],
        [["x"]],
        float("inf"),
        2**64,
        ["g"] * 1001,
        "x" * 1025,
    ],
)
def test_hostile_values_refused(value):
    with pytest.raises(AttributesRefused) as caught:
        normalise_claims({"groups": value})
    assert "groups" in caught.value.message


def test_only_the_attributes_read_are_checked():
    claims = {"groups": ["t"], "odd": {"deep": {"deeper": 1}}, "bad": "\x00"}
    assert normalise_claims(claims, names={"groups"}) == {"groups": ["t"]}


def test_rules_from_groups_keep_the_old_precedence():
    rules = check_rules(
        rules_from_groups(
            groups_claim="groups",
            admin_groups=["adm"],
            reviewer_groups=["rev"],
            teacher_groups=["tea"],
            student_groups=["stu"],
            student_license_id=9,
        )
    )

    def old(groups):  # licensing.signin.sso._mapped_roles before the rules
        held = set(groups)
        staff = next(
            (
                r
                for r, g in (("admin", "adm"), ("reviewer", "rev"), ("teacher", "tea"))
                if g in held
            ),
            None,
        )
        return staff, "stu" in held

    for groups in (
        [],
        ["adm"],
        ["rev", "tea"],
        ["stu"],
        ["tea", "stu"],
        ["adm", "rev", "stu"],
        ["x"],
    ):
        decision = decide(rules, {"groups": groups})
        staff, student = old(groups)
        got_staff = decision.role if decision.role != "student" else None
        assert (got_staff, decision.license_id is not None) == (staff, student), groups


def test_student_groups_without_a_license_give_no_student_rule():
    rules = rules_from_groups(
        groups_claim="g",
        admin_groups=[],
        reviewer_groups=[],
        teacher_groups=[],
        student_groups=["s"],
        student_license_id=None,
    )
    assert rules == []


def test_validate_rules_scoped_to_the_institution(db):
    alpha = license_create(name="A pupils", institution="Alpha", limit=10, strategy="per_user")
    beta = license_create(name="B pupils", institution="Beta", limit=10, strategy="per_user")
    rule = {"when": [], "role": "student", "license": alpha.pk}
    assert validate_rules([rule], institution_id=alpha.institution_id)[0]["license"] == alpha.pk
    with pytest.raises(ValidationError):
        validate_rules([{**rule, "license": beta.pk}], institution_id=alpha.institution_id)
    with pytest.raises(ValidationError):
        validate_rules([{**rule, "courses": [999999]}], institution_id=alpha.institution_id)

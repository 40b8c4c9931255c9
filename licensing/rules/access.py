"""The access-rule language (docs/decisions/access-rules.md): an ordered list of rules on the
attributes of a person (OIDC claims, SAML attributes, LTI claims, SCIM groups), first match
wins, deciding their role, the license a student lands on and the courses they join. Pure: no
ORM (the ids' institution is checked by licensing.signin.access_rules.validate_rules).

A rule: {"when": [condition, ...], "role": "admin" | "reviewer" | "teacher" | "safeguarding" |
"student" | null,
"license": <license id> | null, "courses": [<course id>, ...]}. All conditions must hold (AND);
an empty "when" always holds (a catch-all at the end). A condition names one attribute and one
test: {"attribute": a, "contains": v} (one of its values is v), {"attribute": a, "is": v} (it has
exactly the one value v), {"attribute": a, "any_of": [v, ...]}, {"attribute": a, "present": bool}.
Values compare exactly, case-sensitively: an IdP's group names and entitlements are opaque
identifiers, and folding case would let "Admins" match a rule written for "admins".

Attributes are always a mapping of name -> list of strings (`normalise_claims`). A value a rule
could be fooled by (NUL, a lone surrogate, a nested object, a huge list, a number that is no
number) refuses the sign-in (`AttributesRefused`) rather than being guessed at.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from core.text import is_storable_text

ROLES = ("admin", "reviewer", "teacher", "safeguarding", "student")
# The staff roles the groups mapping (configure_sso --admin-group ...) gives, in its order; a
# safeguarding contact's role is given by a rule (or by hand).
STAFF_ROLES = ("admin", "reviewer", "teacher")
TESTS = ("contains", "is", "any_of", "present")
RULE_KEYS = frozenset({"when", "role", "license", "courses"})

MAX_RULES = 100
MAX_CONDITIONS = 20
MAX_CHOICES = 200  # values of one any_of
MAX_COURSES = 100
MAX_NAME = 255  # an attribute's name (SAML's OIDs and LTI's claim URLs fit)
MAX_VALUE = 1024  # one value (a DN of memberOf, an entitlement URN)
MAX_VALUES = 1000  # values of one attribute (Entra puts at most 200 groups in a token)
MAX_ATTRIBUTES = 500
MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class AccessDecision:
    """What the rules give: `role` (None: no access), the student's `license_id` (a staff
    member may also be a student), `course_ids`, and the index of the rule that matched
    (None: none did)."""

    role: str | None
    license_id: int | None
    course_ids: tuple[int, ...]
    rule_index: int | None


NO_ACCESS = AccessDecision(role=None, license_id=None, course_ids=(), rule_index=None)


class AttributesRefused(ValueError):
    """Attributes no rule may be evaluated on: `message` says which and why (for people and
    the audit row)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


# --- attributes --------------------------------------------------------------------------------


def _scalar(name: str, value: Any) -> str | None:
    """One value as a string; None for a JSON null; AttributesRefused for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) >= 2**53:
            raise AttributesRefused(f"The attribute {name!r} holds a number too large to compare.")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise AttributesRefused(f"The attribute {name!r} holds a number that is no number.")
        return repr(value)
    if isinstance(value, str):
        if not is_storable_text(value):
            raise AttributesRefused(f"The attribute {name!r} holds a NUL or a lone surrogate.")
        if len(value) > MAX_VALUE:
            raise AttributesRefused(f"A value of the attribute {name!r} is too long.")
        return value
    raise AttributesRefused(f"The attribute {name!r} holds a nested object or list.")


def _values(name: str, value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        if len(value) > MAX_VALUES:
            raise AttributesRefused(f"The attribute {name!r} holds too many values.")
        found = (_scalar(name, item) for item in value)
        return [item for item in found if item is not None]
    one = _scalar(name, value)
    return [] if one is None else [one]


def _name(name: Any) -> str:
    if not isinstance(name, str) or not is_storable_text(name) or len(name) > MAX_NAME:
        raise AttributesRefused("An attribute's name is not acceptable.")
    return name


def normalise_claims(
    claims: Mapping[str, Any], names: Iterable[str] | None = None
) -> dict[str, list[str]]:
    """Claims (OIDC, LTI) or attributes (SAML, SCIM) as name -> list of strings. An object is
    flattened one level ("context.label" under "https://.../claim/context"); deeper objects are
    refused only when a rule reads them. With `names`, only those attributes are read (the
    others may hold what they like: no rule looks at them). Raises AttributesRefused."""
    wanted = None if names is None else set(names)
    if len(claims) > MAX_ATTRIBUTES:
        raise AttributesRefused("Too many attributes.")
    out: dict[str, list[str]] = {}
    for raw_name, value in claims.items():
        name = _name(raw_name)
        if isinstance(value, dict):
            for sub, item in value.items():
                full = f"{name}.{_name(sub)}"
                if wanted is None or full in wanted:
                    out[full] = _values(full, item)
            continue
        if wanted is None or name in wanted:
            out[name] = _values(name, value)
    return out


def attributes_read(rules: list[dict]) -> set[str]:
    """The attribute names the rules' conditions read."""
    return {c["attribute"] for rule in rules for c in rule.get("when", [])}


# --- evaluation --------------------------------------------------------------------------------


def _holds(condition: dict, attributes: Mapping[str, list[str]]) -> bool:
    values = attributes.get(condition["attribute"]) or []
    if "contains" in condition:
        return condition["contains"] in values
    if "is" in condition:
        return list(values) == [condition["is"]]
    if "any_of" in condition:
        return not set(values).isdisjoint(condition["any_of"])
    return bool(values) == bool(condition.get("present"))


def decide(rules: list[dict], attributes: Mapping[str, list[str]]) -> AccessDecision:
    """The first rule whose conditions all hold decides; none: no access. `rules` are checked
    ones (validate_rules)."""
    for index, rule in enumerate(rules):
        if all(_holds(condition, attributes) for condition in rule.get("when", [])):
            return AccessDecision(
                role=rule.get("role"),
                license_id=rule.get("license"),
                course_ids=tuple(rule.get("courses") or ()),
                rule_index=index,
            )
    return NO_ACCESS


# --- the rules' shape --------------------------------------------------------------------------


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ValidationError(
            _("%(what)s: a non-empty text of at most %(limit)s characters"),
            params={"what": what, "limit": limit},
        )
    if not is_storable_text(value):
        raise ValidationError(_("%(what)s holds a NUL or a lone surrogate"), params={"what": what})
    return value


def _condition(value: Any, where: str) -> dict:
    if not isinstance(value, dict) or "attribute" not in value:
        raise ValidationError(
            _("%(where)s: a condition is an object with an attribute"), params={"where": where}
        )
    tests = [t for t in TESTS if t in value]
    if len(tests) != 1 or set(value) != {"attribute", tests[0]}:
        raise ValidationError(
            _("%(where)s: a condition has one attribute and one of contains, is, any_of, present"),
            params={"where": where},
        )
    test, arg = tests[0], value[tests[0]]
    checked: Any
    if test == "present":
        if not isinstance(arg, bool):
            raise ValidationError(_("%(where)s: present is true or false"), params={"where": where})
        checked = arg
    elif test == "any_of":
        if not isinstance(arg, list) or not 0 < len(arg) <= MAX_CHOICES:
            raise ValidationError(
                _("%(where)s: any_of is a list of 1 to 200 values"), params={"where": where}
            )
        checked = list(dict.fromkeys(_text(v, where, MAX_VALUE) for v in arg))
    else:
        checked = _text(arg, where, MAX_VALUE)
    return {"attribute": _text(value["attribute"], where, MAX_NAME), test: checked}


def _id(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
        raise ValidationError(_("%(where)s: an id is a whole number"), params={"where": where})
    return value


def _rule(value: Any, number: int) -> dict:
    where = _("Rule %(number)s") % {"number": number}
    if not isinstance(value, dict) or not set(value) <= RULE_KEYS:
        raise ValidationError(
            _("%(where)s: an object with when, role, license, courses"), params={"where": where}
        )
    when = value.get("when", [])
    if not isinstance(when, list) or len(when) > MAX_CONDITIONS:
        raise ValidationError(
            _("%(where)s: when is a list of at most 20 conditions"), params={"where": where}
        )
    role = value.get("role")
    if role is not None and role not in ROLES:
        raise ValidationError(
            _("%(where)s: role is admin, reviewer, teacher, safeguarding, student or null"),
            params={"where": where},
        )
    license = value.get("license")
    license = None if license is None else _id(license, where)
    courses = value.get("courses", [])
    if not isinstance(courses, list) or len(courses) > MAX_COURSES:
        raise ValidationError(
            _("%(where)s: courses is a list of course ids"), params={"where": where}
        )
    if role == "student" and license is None:
        raise ValidationError(_("%(where)s: a student needs a license"), params={"where": where})
    if role is None and (license is not None or courses):
        raise ValidationError(
            _("%(where)s: no access gives no license and no course"), params={"where": where}
        )
    return {
        "when": [_condition(c, where) for c in when],
        "role": role,
        "license": license,
        "courses": list(dict.fromkeys(_id(c, where) for c in courses)),
    }


def check_rules(value: Any) -> list[dict]:
    """The rules in their stored shape (every key present, duplicates dropped), or
    ValidationError. Does not look at whose the ids are."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_RULES:
        raise ValidationError(_("The rules are a list of at most 100 rules"))
    return [_rule(rule, number) for number, rule in enumerate(value, start=1)]


# --- today's groups mapping as rules ------------------------------------------------------------


def rules_from_groups(
    *,
    groups_claim: str,
    admin_groups: list[str],
    reviewer_groups: list[str],
    teacher_groups: list[str],
    student_groups: list[str],
    student_license_id: int | None,
) -> list[dict]:
    """The rules that decide as the groups mapping did: the first staff role of admin, reviewer,
    teacher whose groups the person is in, and besides it the student license when they are in
    a student group (a staff member may also be a student), else the student role alone."""
    student = bool(student_groups) and student_license_id is not None
    in_students = {"attribute": groups_claim, "any_of": list(student_groups)}
    rules: list[dict] = []
    for role, groups in zip(
        STAFF_ROLES, (admin_groups, reviewer_groups, teacher_groups), strict=True
    ):
        if not groups:
            continue
        in_staff = {"attribute": groups_claim, "any_of": list(groups)}
        if student:
            rules.append(_made([in_staff, in_students], role, student_license_id))
        rules.append(_made([in_staff], role, None))
    if student:
        rules.append(_made([in_students], "student", student_license_id))
    return rules


def _made(when: list[dict], role: str, license_id: int | None) -> dict:
    return {"when": when, "role": role, "license": license_id, "courses": []}

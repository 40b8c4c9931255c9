"""Access rules for the sign-in paths (OIDC, SAML, LTI, SCIM): the language is
licensing.rules.access (pure); here, the one check that reads the database: a rule's license
and courses are its institution's (docs/decisions/access-rules.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from core.jsonio import parse_json

from ..models import Course, License
from ..rules.access import (
    AccessDecision,
    AttributesRefused,
    attributes_read,
    check_rules,
    decide,
    normalise_claims,
    rules_from_groups,
)

__all__ = [
    "AccessDecision",
    "AttributesRefused",
    "attributes_read",
    "decide",
    "normalise_claims",
    "rules_file_read",
    "rules_from_groups",
    "validate_rules",
]


def validate_rules(value: Any, *, institution_id: int) -> list[dict]:
    """The rules in their stored shape, their license and course ids the institution's; raises
    ValidationError (another institution's id is refused like an unknown one)."""
    rules = check_rules(value)
    licenses = {r["license"] for r in rules if r["license"] is not None}
    known = set(
        License.objects.filter(pk__in=licenses, institution_id=institution_id).values_list(
            "pk", flat=True
        )
    )
    if licenses - known:
        raise ValidationError(
            _("No license of this institution has the id %(ids)s"),
            params={"ids": ", ".join(map(str, sorted(licenses - known)))},
        )
    courses = {c for r in rules for c in r["courses"]}
    found = set(
        Course.objects.filter(pk__in=courses, institution_id=institution_id).values_list(
            "pk", flat=True
        )
    )
    if courses - found:
        raise ValidationError(
            _("No course of this institution has the id %(ids)s"),
            params={"ids": ", ".join(map(str, sorted(courses - found)))},
        )
    return rules


MAX_RULES_FILE = 1_000_000  # bytes: 100 rules of 20 conditions of 200 values fit


def rules_file_read(path: str) -> Any:
    """The JSON of a rules file (the commands' --rules), strict (no NaN, no 1e400, no lone
    surrogate); its shape is validate_rules' check. Raises ValidationError."""
    try:
        raw = Path(path).read_bytes()[: MAX_RULES_FILE + 1]
        if len(raw) > MAX_RULES_FILE:
            raise ValidationError(_("The rules file is larger than 1 MB"))
        return parse_json(raw.decode("utf-8"))
    except OSError as exc:
        raise ValidationError(
            _("Cannot read the rules file: %(error)s"), params={"error": exc.strerror}
        ) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(
            _("The rules file is not valid JSON: %(error)s"), params={"error": str(exc)[:200]}
        ) from exc


def try_rules(
    rules: list[dict], attributes_text: str, *, attributes_of=normalise_claims
) -> dict[str, Any]:
    """The admin's "try these attributes" panel: the decision for pasted JSON attributes
    (an object of name -> value or list of values), and which rule decided."""
    try:
        pasted = parse_json(attributes_text[: MAX_RULES_FILE + 1])
    except (json.JSONDecodeError, ValueError) as exc:
        return {"outcome": "invalid", "message": str(_("Not JSON: %(error)s") % {"error": exc})}
    if not isinstance(pasted, dict):
        return {"outcome": "invalid", "message": str(_("Paste a JSON object of attributes"))}
    try:
        attributes = attributes_of(pasted, attributes_read(rules))
    except AttributesRefused as exc:
        return {"outcome": "refused", "message": exc.message}
    decision = decide(rules, attributes)
    if decision.rule_index is None:
        return {"outcome": "none", "message": str(_("No rule matches: no access."))}
    found = None
    if decision.license_id is not None:
        found = (
            License.objects.filter(pk=decision.license_id).select_related("license_type").first()
        )
    return {
        "outcome": "matched",
        "rule": decision.rule_index + 1,
        "role": decision.role or str(_("no access")),
        "license": f"{found.name} ({found.license_type.name})" if found else "-",
        "courses": list(
            Course.objects.filter(pk__in=decision.course_ids).values_list("code", flat=True)
        ),
    }


def _condition_text(condition: dict) -> str:
    test = next(t for t in ("contains", "is", "any_of", "present") if t in condition)
    return f"{condition['attribute']} {test} {condition[test]}"


def rules_table_html(rules: list[dict]):
    """The rules as a table people read (the JSON field above is what is edited)."""
    if not rules:
        return _("No rules: nobody gets a role.")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                number,
                " AND ".join(_condition_text(c) for c in rule.get("when", [])) or _("always"),
                rule.get("role") or _("no access"),
                rule.get("license") or "-",
                ", ".join(map(str, rule.get("courses", []))) or "-",
            )
            for number, rule in enumerate(rules, start=1)
        ),
    )
    return format_html(
        "<table><caption>{}</caption><thead><tr><th scope='col'>#</th><th scope='col'>{}</th>"
        "<th scope='col'>{}</th><th scope='col'>{}</th><th scope='col'>{}</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        _("Access rules, first match wins"),
        _("when"),
        _("role"),
        _("license id"),
        _("course ids"),
        rows,
    )

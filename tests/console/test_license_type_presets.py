"""License-type presets by age group (licensing.rules.presets, docs/presets.md): each preset's
policy and guardrails compile; manage.py create_license_type; the admin's add form started from
a preset."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from licensing.models import AuditEvent, Institution, LicenseType
from licensing.rules.guardrails import compile_guardrails
from licensing.rules.policy import Policy, validate_policy_document
from licensing.rules.presets import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_compiles(name):
    preset = PRESETS[name]
    validate_policy_document(preset.policy)
    compile_guardrails(preset.guardrails)


def test_primary_is_chat_only_moderated_and_short():
    primary = PRESETS["primary"]
    assert list(primary.policy["services"]) == ["chat_completions"]
    assert "image_generation" not in primary.policy["services"]
    guardrails = compile_guardrails(primary.guardrails)
    assert guardrails.moderation == frozenset({"input", "output"})
    assert primary.policy["services"]["chat_completions"]["params"]["max_tokens"]["max"] <= 1000
    assert "image_generation" in PRESETS["adult"].policy["services"]


@pytest.mark.django_db
def test_the_command(capsys):
    school = Institution.objects.create(name="Hill Primary")
    call_command("create_license_type", "--preset", "primary", "--institution", "Hill Primary")
    made = LicenseType.objects.get(institution=school)
    assert made.name == "Primary pupils (under 13)"
    assert made.policy == PRESETS["primary"].policy
    assert made.guardrails == PRESETS["primary"].guardrails
    assert "created for 'Hill Primary'" in capsys.readouterr().out
    row = AuditEvent.objects.get(action="policy_changed")
    assert row.detail == {"created": True, "preset": "primary"} and row.institution == school
    with pytest.raises(CommandError, match="already has"):
        call_command("create_license_type", "--preset", "primary", "--institution", "Hill Primary")
    with pytest.raises(CommandError, match="No institution"):
        call_command("create_license_type", "--preset", "staff", "--institution", "Nowhere")
    with pytest.raises(CommandError):
        call_command("create_license_type", "--preset", "toddler", "--institution", "Hill Primary")
    with pytest.raises(CommandError, match="NUL"):
        call_command(
            "create_license_type", "--preset", "staff", "--institution", "Hill Primary",
            "--name", "a\x00b",
        )  # fmt: skip
    call_command(
        "create_license_type", "--preset", "staff", "--institution", "Hill Primary",
        "--name", "Teachers",
    )  # fmt: skip
    assert LicenseType.objects.filter(institution=school).count() == 2


@pytest.mark.django_db
def test_the_admin_add_form_starts_from_a_preset(admin_client):
    school = Institution.objects.create(name="Hill Secondary")
    page = admin_client.get("/admin/licensing/licensetype/add/")
    assert page.status_code == 200
    assert b'name="preset"' in page.content and b"Secondary pupils (13 to 18)" in page.content
    response = admin_client.post(
        "/admin/licensing/licensetype/add/",
        {
            "name": "Years 7-13",
            "institution": school.pk,
            "active": "on",
            "policy": '{"version": 1, "services": {}}',
            "guardrails": "{}",
            "preset": "secondary",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    made = LicenseType.objects.get(name="Years 7-13")
    assert made.policy == PRESETS["secondary"].policy
    assert made.guardrails == {"input": {"moderation": True}}
    Policy(made.policy)  # compiles for the hot path
    change = admin_client.get(f"/admin/licensing/licensetype/{made.pk}/change/")
    assert b'name="preset"' not in change.content  # a preset starts a type, not changes one

"""Migration 0020: an existing provider's groups mapping becomes rules that decide as
`_mapped_roles` did (the same staff role first, the student license beside it or alone)."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from licensing.access.services import license_create
from licensing.models import IdentityProvider
from licensing.rules.access import decide

BEFORE = [("licensing", "0019_person_language")]


def test_existing_groups_become_rules_with_the_same_decisions(transactional_db):
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    license = license_create(name="Pupils", institution="Old School", strategy="per_user")
    try:
        executor.migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        OldProvider = old.get_model("licensing", "IdentityProvider")
        OldProvider.objects.create(
            institution_id=license.institution_id,
            issuer="https://idp.old.example",
            client_id="c",
            groups_claim="memberOf",
            admin_groups=["adm"],
            reviewer_groups=[],
            teacher_groups=["tea"],
            student_groups=["stu"],
            student_license_id=license.pk,
        )
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    finally:
        MigrationExecutor(connection).migrate(latest)
    provider = IdentityProvider.objects.get(issuer="https://idp.old.example")
    rules = provider.access_rules

    def decided(groups):
        d = decide(rules, {"memberOf": groups})
        return (d.role if d.role != "student" else None), d.license_id

    assert decided(["adm", "tea"]) == ("admin", None)
    assert decided(["tea", "stu"]) == ("teacher", license.pk)
    assert (
        decided(["stu"]) == (None, license.pk)
        and decide(rules, {"memberOf": ["stu"]}).role == "student"
    )
    assert decided(["other"]) == (None, None)
    assert decide(rules, {"groups": ["adm"]}).role is None  # the provider's own claim only

"""Two PATCHes of one group at once (Entra ID sends members in batches from several workers):
on PostgreSQL the group's row lock orders them, and no member is lost."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from licensing.models import ScimGroup, ScimUser
from licensing.provisioning import services

from .conftest import PATCH_SCHEMA, school

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks: PostgreSQL's behaviour"
)


def test_two_patches_of_one_group_lose_no_member(transactional_db):
    alpha = school("Alpha School")
    institution_id = alpha.institution.pk
    people = [
        services.do_create_user(
            institution_id=institution_id,
            data={"userName": f"p{n}@alpha.example.edu", "externalId": f"p{n}"},
            request=None,
            who="test",
        )
        for n in range(8)
    ]
    group = services.do_create_group(
        institution_id=institution_id,
        data={"displayName": "alpha-students"},
        request=None,
        who="test",
    )
    batches = [people[:4], people[4:]]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def patch(batch):
        try:
            barrier.wait()
            services.do_patch_group(
                institution_id=institution_id,
                scim_id=str(group.scim_id),
                data={
                    "schemas": [PATCH_SCHEMA],
                    "Operations": [
                        {
                            "op": "add",
                            "path": "members",
                            "value": [{"value": str(p.scim_id)} for p in batch],
                        }
                    ],
                },
                request=None,
                who="test",
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=patch, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    members = set(ScimGroup.objects.get(pk=group.pk).members.values_list("pk", flat=True))
    assert members == set(ScimUser.objects.values_list("pk", flat=True))
    assert len(members) == 8

"""Two workers taking the same assertion at once (PostgreSQL): exactly one wins, the other is
a `saml_replay`; expired ids are dropped on the way."""

from __future__ import annotations

import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone

from licensing.access.services import license_create
from licensing.models import IdentityProvider, SamlAssertionUse
from licensing.signin import saml


def _answer(assertion_id: str, not_on_or_after: str = "2099-01-01T00:00:00Z"):
    conditions = SimpleNamespace(not_on_or_after=not_on_or_after)
    return SimpleNamespace(assertion=SimpleNamespace(id=assertion_id, conditions=conditions))


@pytest.fixture
def provider(db):
    license = license_create(name="R", institution="Race School", limit=10, strategy="per_user")
    return IdentityProvider.objects.create(
        institution=license.institution,
        protocol=IdentityProvider.Protocol.SAML,
        issuer="https://idp.race.example/idp",
        client_id="",
    )


def test_second_use_is_a_replay(provider):
    saml.assertion_use_record(provider, _answer("id-1"))
    with pytest.raises(saml.SamlError) as caught:
        saml.assertion_use_record(provider, _answer("id-1"))
    assert caught.value.reason == "saml_replay"


def test_expired_ids_are_dropped(provider):
    SamlAssertionUse.objects.create(
        provider=provider, assertion_id="old", expires_at=timezone.now() - timedelta(hours=1)
    )
    saml.assertion_use_record(provider, _answer("new"))
    assert list(SamlAssertionUse.objects.values_list("assertion_id", flat=True)) == ["new"]


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once(provider):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serialises writers: the race is PostgreSQL's")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def take():
        barrier.wait()
        try:
            saml.assertion_use_record(provider, _answer("id-race"))
            outcomes.append("taken")
        except saml.SamlError as exc:
            outcomes.append(exc.reason)
        finally:
            connection.close()

    threads = [threading.Thread(target=take) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["saml_replay", "taken"]
    assert SamlAssertionUse.objects.filter(assertion_id="id-race").count() == 1

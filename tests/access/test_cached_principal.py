"""The event loop's cache-only authentication never queries the database, even when a cache
entry expires between two reads (found by the instruction-count bench, which runs slowly
enough under valgrind for the entries to expire mid-request: a 500 SynchronousOnlyOperation)."""

from __future__ import annotations

import asyncio

import pytest

from core.localcache import clear_all
from licensing.access import credentials
from licensing.access.credentials import api_key_create, authenticate
from licensing.access.services import license_create


@pytest.mark.django_db(transaction=True)
def test_an_entry_expiring_between_two_reads_costs_no_query_on_the_event_loop(monkeypatch):
    lic = license_create(name="lic", institution="Inst", limit=None)
    row, key = api_key_create(license=lic, name="k")
    clear_all()
    assert credentials.resolve_credential(key).api_key_id == row.pk  # fills both caches

    real_get = credentials._key_cache.get
    reads = []

    def expiring_get(digest):  # the entry is there once, then gone (its TTL ran out)
        reads.append(digest)
        return real_get(digest) if len(reads) == 1 else None

    monkeypatch.setattr(credentials._key_cache, "get", expiring_get)

    async def on_the_loop():
        return await authenticate(f"Bearer {key}")

    principal = asyncio.run(on_the_loop())
    assert principal.api_key_id == row.pk and principal.license.id == lic.pk
    assert len(reads) == 1

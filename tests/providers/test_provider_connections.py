"""The provider connection pool: kept-alive connections the upstream closed while idle are not
reused (no 503 after an idle spell)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import UPSTREAM_KEY

pytestmark = pytest.mark.django_db(transaction=True)


def test_no_failure_after_the_upstream_closes_idle_connections(
    client, auth, catalog, license, settings
):
    from catalog.services import connection_configure
    from core.localcache import clear_all
    from fake_upstreams import OpenAIFake, serve
    from licensing.models import Transaction

    # The upstream drops an idle connection after 0.2 s; the gateway would keep it for 4 s.
    with serve(OpenAIFake(api_key=UPSTREAM_KEY), keep_alive=0.2) as fake:
        connection_configure(provider_slug="direct", base_url=fake.base_url, api_key=UPSTREAM_KEY)
        clear_all()
        statuses = []
        for _ in range(4):
            response = client.post(
                "/v1/embeddings",
                json={"model": "text-embedding-3-small", "input": "idle"},
                headers=auth,
            )
            statuses.append(response.status_code)
            time.sleep(0.5)
    assert statuses == [200] * 4
    assert len(fake.requests) == 4
    assert Transaction.objects.filter(status_code=200).count() == 4

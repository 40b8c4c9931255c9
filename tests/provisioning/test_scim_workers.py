"""SCIM on two gateway worker processes (PostgreSQL, the workers connected by Redis as a
deployment with several workers is): a person provisioned through worker 0 uses their key on
worker 1 against the fake provider; deactivated through worker 0, the very next request with
the key on worker 1 is refused, and their portal session there is gone."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.access.credentials import api_key_create
from licensing.models import EndUser
from tests.processes import redis_server_or_skip, running_workers

from .conftest import GROUP_SCHEMA, PATCH_SCHEMA, school
from .test_scim_users import okta_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BODY = {"model": "text-embedding-3-small", "input": "a few words", "encoding_format": "float"}


@pytest.fixture
def two_workers(transactional_db, tmp_path, catalog):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("two workers on one database: PostgreSQL's, as deployed")
    redis = redis_server_or_skip(tmp_path)
    # Each its own generation file and a long cache TTL: only Redis's message can make
    # worker 1 forget the key it cached.
    env = lambda n: {  # noqa: E731
        "REDIS_URL": redis.url,
        "GATEWAY_CACHE_TTL": "300",
        "GATEWAY_INVALIDATION_FILE": str(tmp_path / f"generation-{n}"),
    }
    try:
        with running_workers(2, tmp_path, env) as workers:
            yield workers
    finally:
        redis.stop()


def _scim(worker, token: str, method: str, path: str, body: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/scim+json"}
    return worker.http.request(method, "/scim/v2" + path, headers=headers, json=body)


def test_deactivation_on_one_worker_refuses_the_next_request_on_the_other(two_workers):
    first, second = two_workers
    alpha = school("Alpha School")
    made = _scim(first, alpha.token, "POST", "/Users", okta_user("ann@alpha.example.edu"))
    assert made.status_code == 201, made.text
    ann = made.json()["id"]
    group = {
        "schemas": [GROUP_SCHEMA],
        "displayName": "alpha-students",
        "members": [{"value": ann}],
    }
    assert _scim(first, alpha.token, "POST", "/Groups", group).status_code == 201
    user = get_user_model().objects.get(scim_user__scim_id=ann)
    end_user = EndUser.objects.get(user=user, license=alpha.license)  # the student role's
    _, key = api_key_create(license=alpha.license, end_user=end_user)
    portal = Client()
    portal.force_login(user)
    session = portal.cookies[settings.SESSION_COOKIE_NAME].value
    cookies = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session}"}
    headers = {"Authorization": f"Bearer {key}"}

    for _ in range(2):  # the second from worker 1's caches
        used = second.http.post("/v1/embeddings", headers=headers, json=BODY)
        assert used.status_code == 200, used.text
    assert second.http.get("/portal/", headers=cookies).status_code == 200

    off = {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "value": {"active": False}}]}
    assert _scim(first, alpha.token, "PATCH", f"/Users/{ann}", off).status_code == 200

    refused = second.http.post("/v1/embeddings", headers=headers, json=BODY)
    assert refused.status_code == 401, refused.text
    gone = second.http.get("/portal/", headers=cookies)
    assert gone.status_code == 302 and "/portal/login/" in gone.headers["Location"]

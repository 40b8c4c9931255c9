"""Cache invalidation across worker processes: a key deactivated in one process is refused by
every worker within a second (Redis pub/sub when REDIS_URL is set, else the generation file);
a first-time JWT user clears nothing."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from django.db import transaction
from django.test import override_settings

from catalog.models import Connection, ProviderModel
from core import localcache
from licensing.models import ApiKey, EndUser, Institution, JwtIssuer, License
from tests.kit import wait_until
from tests.processes import RedisServer, redis_server_or_skip, running_workers

ROOT = Path(__file__).resolve().parents[2]


class Mechanism:
    """How this process and the workers are connected: a shared file, or Redis."""

    def __init__(self, tmp_path: Path, redis: dict | None):
        self.tmp_path, self.redis = tmp_path, redis

    @property
    def server(self) -> RedisServer | None:
        return self.redis["server"] if self.redis else None

    def env(self, n: int) -> dict[str, str]:
        if self.server is None:
            return {"GATEWAY_INVALIDATION_FILE": str(self.tmp_path / "cache-generation")}
        # Each process its own file: only Redis connects them.
        return {
            "REDIS_URL": self.server.url,
            "GATEWAY_INVALIDATION_FILE": str(self.tmp_path / f"worker-{n}"),
        }


def with_mechanism(tmp_path: Path, server: RedisServer | None):
    if server is None:
        return override_settings(
            GATEWAY_INVALIDATION_FILE=tmp_path / "cache-generation", REDIS_URL=None
        )
    return override_settings(
        REDIS_URL=server.url, GATEWAY_INVALIDATION_FILE=tmp_path / "test-process"
    )


# The workers outlive a test: two per mechanism for the module (a start is ~2 s of CPU each),
# and before each test a barrier (`_caches_cleared`) so that nothing a worker cached for the
# test before answers for this one (the previous test's retired model, say).
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    holder = {"server": redis_server_or_skip(tmp_path_factory.mktemp("redis"))}
    yield holder
    localcache.reset_transport()
    holder["server"].stop()


@pytest.fixture(scope="module", params=["file", "redis"])
def invalidation(request, tmp_path_factory):
    """Settings for this process and the workers' environment, per mechanism."""
    tmp_path = tmp_path_factory.mktemp(f"invalidation-{request.param}")
    redis = request.getfixturevalue("redis_server") if request.param == "redis" else None
    with with_mechanism(tmp_path, redis and redis["server"]):
        yield Mechanism(tmp_path, redis)
    localcache.reset_transport()


@pytest.fixture(scope="module")
def worker_processes(django_db_setup, invalidation):
    # A long TTL: only the invalidation can make them see a change.
    env = lambda n: {"GATEWAY_CACHE_TTL": "300", **invalidation.env(n)}  # noqa: E731
    with running_workers(2, invalidation.tmp_path, env) as workers:
        yield workers


@pytest.fixture
def workers(transactional_db, worker_processes):
    """The module's two workers, their caches cleared since the test's fixtures wrote their rows
    (a test asks for `catalog` before `workers`)."""
    _caches_cleared(worker_processes)
    return worker_processes


def _caches_cleared(workers) -> None:
    """A probe key cached by every worker, then deactivated: once every worker refuses it, each
    has cleared all its caches since (a clear empties them all). The probe is deleted after."""
    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create

    license = license_create(name="cache probe")
    row, key = api_key_create(license=license)
    headers = {"Authorization": f"Bearer {key}"}
    for worker in workers:
        for _ in range(2):
            assert worker.http.get("/v1/license", headers=headers).status_code == 200
    row.active = False
    row.save()
    statuses_within(workers, headers, 401, limit=10.0)
    row.delete()
    license.delete()


def statuses_within(workers, headers, expected: int, limit: float) -> list[float]:
    """Poll every worker until each answers `expected`; the seconds each one took."""
    started = time.monotonic()
    took: dict[int, float] = {}
    while len(took) < len(workers) and time.monotonic() - started < limit + 2:
        for i, worker in enumerate(workers):
            if i not in took and worker.http.get("/v1/license", headers=headers).status_code == (
                expected
            ):
                took[i] = time.monotonic() - started
        time.sleep(0.01)
    assert len(took) == len(workers), f"workers still answering the old state: {took}"
    return list(took.values())


@pytest.mark.slow
def test_a_deactivated_key_is_refused_by_every_worker_within_a_second(
    workers, make_license, make_key
):
    license = make_license()
    key = make_key(license)
    headers = {"Authorization": f"Bearer {key}"}
    for worker in workers:
        for _ in range(2):  # the second answer comes from the worker's caches
            assert worker.http.get("/v1/license", headers=headers).status_code == 200

    row = ApiKey.objects.get(license=license)
    row.active = False
    row.save()
    took = statuses_within(workers, headers, 401, limit=1.0)
    print(f"401 on every worker after {max(took) * 1000:.0f} ms")
    assert max(took) < 1.0, took

    row.active = True  # and back: the same path
    row.save()
    assert max(statuses_within(workers, headers, 200, limit=1.0)) < 1.0

    # A bulk update (the admin's actions use update(), then clear_all()).
    License.objects.filter(pk=license.pk).update(active=False)
    localcache.clear_all()
    assert max(statuses_within(workers, headers, 401, limit=1.0)) < 1.0


def _disable_embeddings(license):
    license.license_type.policy = {"version": 1, "services": {"chat_completions": {}}}
    license.license_type.save()


def _deactivate_type(license):
    license.license_type.active = False
    license.license_type.save()


def _deactivate_license(license):
    license.active = False
    license.save()


def _retire_model(license):
    for row in ProviderModel.objects.filter(model__model_id="text-embedding-3-small"):
        row.active = False
        row.save()


def _break_connection(license):
    row = Connection.objects.get(provider__slug="direct", name="default")
    row.base_url = "http://127.0.0.1:9/v1"  # the discard port: nothing answers
    row.save()


@pytest.mark.slow
@pytest.mark.parametrize(
    "change,status",
    [
        (_deactivate_license, 401),
        (_deactivate_type, 401),
        (_disable_embeddings, 403),
        (_retire_model, 400),
        (_break_connection, 503),
    ],
)
def test_every_cached_row_reaches_every_worker_within_a_second(
    catalog, workers, make_license, make_key, change, status
):
    """Keys, licenses, license types (policy), catalog rows and connections: one save, and
    every worker answers the new state within a second."""
    license = make_license()
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    body = {"model": "text-embedding-3-small", "input": "x", "encoding_format": "float"}

    def post(worker):
        return worker.http.post("/v1/embeddings", headers=headers, json=body).status_code

    for worker in workers:
        assert [post(worker), post(worker)] == [200, 200]  # the second from the caches
    change(license)
    started, took = time.monotonic(), {}
    while len(took) < len(workers) and time.monotonic() - started < 3:
        for i, worker in enumerate(workers):
            if i not in took and post(worker) == status:
                took[i] = time.monotonic() - started
        time.sleep(0.01)
    assert len(took) == len(workers) and max(took.values()) < 1.0, took


@pytest.mark.slow
@pytest.mark.parametrize("invalidation", ["redis"], indirect=True)
def test_workers_resubscribe_after_a_redis_restart(workers, invalidation, make_license, make_key):
    key = make_key(make_license())
    headers = {"Authorization": f"Bearer {key}"}
    for worker in workers:
        assert worker.http.get("/v1/license", headers=headers).status_code == 200
    old = invalidation.server
    old.stop()
    new = invalidation.redis["server"] = RedisServer(invalidation.tmp_path, port=old.port)
    _wait_for_subscribers(new.url, len(workers))  # the listeners retry every second
    row = ApiKey.objects.get()
    row.active = False
    row.save()
    assert max(statuses_within(workers, headers, 401, limit=1.0)) < 1.0


def _wait_for_subscribers(url: str, count: int) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        wait_until(
            lambda: client.pubsub_numsub(localcache.REDIS_CHANNEL)[0][1] == count,
            every=0.1,
            what=lambda: f"subscribers: {client.pubsub_numsub(localcache.REDIS_CHANNEL)}",
        )
    finally:
        client.close()


def test_invalidation_is_published_when_the_transaction_commits(transactional_db, tmp_path):
    path = tmp_path / "generation"
    with override_settings(GATEWAY_INVALIDATION_FILE=path, REDIS_URL=None):
        institution = Institution.objects.create(name="Commit school")
        before = path.read_bytes()
        with transaction.atomic():
            institution.name = "Commit school 2"
            institution.save()
            # Another worker reloading now would cache the old row: nothing published yet.
            assert path.read_bytes() == before
        assert path.read_bytes() != before
    localcache.reset_transport()


def test_another_process_file_write_clears_this_process_caches(tmp_path):
    path = tmp_path / "generation"
    with override_settings(GATEWAY_INVALIDATION_FILE=path, REDIS_URL=None):
        cache = localcache.TTLCache("probe")
        try:
            cache.get("x")  # first poll: remembers the current token
            cache.set("x", 1)
            path.write_bytes(b"written-by-another-process")
            time.sleep(localcache.POLL_INTERVAL + 0.01)
            assert cache.get("x") is None
        finally:
            localcache._registry.remove(cache)
    localcache.reset_transport()


# --- the end-user fix ------------------------------------------------------------------------

HS_SECRET = "hs-secret-cache-tests-0123456789abcdef"


def test_a_first_time_jwt_user_does_not_clear_the_caches(client, catalog, license, api_key):
    JwtIssuer.objects.create(
        institution=Institution.objects.get(),
        license=license,
        issuer="https://idp.cache.example",
        audience="gateway",
        algorithms=["HS256"],
        hs256_secret=HS_SECRET,
    )
    key_headers = {"Authorization": f"Bearer {api_key}"}
    assert client.get("/v1/models", headers=key_headers).status_code == 200  # warm the caches
    generations = {cache.name: cache.generation for cache in localcache._registry}

    now = int(time.time())
    token = jwt.encode(
        {"iss": "https://idp.cache.example", "aud": "gateway", "sub": "new", "exp": now + 60},
        HS_SECRET,
        algorithm="HS256",
    )
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == (
        200
    )
    assert EndUser.objects.filter(subject="new").exists()  # provisioned
    after = {cache.name: cache.generation for cache in localcache._registry}
    assert after == generations  # catalog, keys, licenses, issuers: all kept

    EndUser.objects.get(subject="new").delete()  # a removed user must not stay cached
    assert localcache._registry[0].generation != generations[localcache._registry[0].name]

"""PostgreSQL connections per worker process stay within the documented bound
(GATEWAY_PG_POOL_SIZE for the hot path + GATEWAY_PG_ORM_POOL_SIZE for the ORM) under admin,
management-API, live-feed and /v1 load at once (docs/deployment.md, "PostgreSQL connections")."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from licensing.console.consumers import PATH
from tests.live_helpers import session_cookie
from tests.processes import running_workers

# slow: worker processes and PostgreSQL connection counts
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOT_POOL, ORM_POOL = 8, 6  # the defaults the README and docs/deployment.md state
CLIENTS = 32  # concurrent clients, far more than the ORM pool has connections
ROUNDS = 4  # each client every kind of request once ((n + r) % 4), all 32 at once


def _count_connections(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


class PeakSampler(threading.Thread):
    """Counts the worker's backends in pg_stat_activity, over its own connection, until told
    to stop; keeps the highest count seen."""

    def __init__(self, application_name: str):
        super().__init__(daemon=True)
        s = connection.settings_dict
        self.conn = psycopg.connect(
            host=s["HOST"] or "127.0.0.1",
            port=s["PORT"] or 5432,
            user=s["USER"],
            password=s["PASSWORD"] or None,
            dbname=s["NAME"],
            autocommit=True,
        )
        self.application_name = application_name
        self.peak = self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            row = self.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                [self.application_name],
            ).fetchone()
            self.peak, self.samples = max(self.peak, row[0]), self.samples + 1
            self.done.wait(0.005)  # a sampling pace, not a wait for time to pass

    def stop(self) -> int:
        self.done.set()
        self.join()
        self.conn.close()
        return self.peak


def test_connections_per_worker_stay_within_the_bound(catalog, make_license, make_key, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL backends")
    root = get_user_model().objects.create_superuser("root", password="pw")
    cookie = session_cookie(root)
    token = Token.objects.create(user=root).key
    # A key per client: each /v1 client's first look-ups are cache misses (ORM threads).
    keys = [make_key(make_license(name=f"lic-{n}", limit=10**9)) for n in range(CLIENTS)]
    app = f"gateway-conns-{os.getpid()}"

    # The bound is the point here, not the wait: on a busy 2-core machine 32 clients can queue
    # for the ORM pool's 6 connections longer than the default 2 s (a 500), so they wait longer.
    env = {"PGAPPNAME": app, "GATEWAY_PG_POOL_TIMEOUT": "30"}
    with running_workers(1, tmp_path, env=env) as (worker,):
        base = worker.url
        admin = {"Cookie": cookie}
        manage = {"Authorization": f"Token {token}"}

        def client(n: int) -> list[int]:
            import httpx

            statuses = []
            v1 = {"Authorization": f"Bearer {keys[n]}"}
            with httpx.Client(base_url=base, timeout=60) as http:
                for r in range(ROUNDS):
                    kind = (n + r) % 4
                    if kind == 0:
                        for path in ("/admin/", "/admin/licensing/transaction/"):
                            statuses.append(http.get(path, headers=admin).status_code)
                    elif kind == 1:
                        for path in ("/manage/v1/licenses", "/manage/v1/transactions"):
                            statuses.append(http.get(path, headers=manage).status_code)
                    elif kind == 2:
                        url = "ws" + base.removeprefix("http") + PATH
                        with connect(url, additional_headers=admin, origin=base, open_timeout=60):
                            statuses.append(101)
                    else:
                        statuses.append(http.get("/v1/license", headers=v1).status_code)
                        body = {"model": "text-embedding-3-small", "input": "count me"}
                        r = http.post("/v1/embeddings", json=body, headers=v1)
                        statuses.append(r.status_code)
            return statuses

        sampler = PeakSampler(app)
        sampler.start()
        try:
            with ThreadPoolExecutor(CLIENTS) as pool:
                results = [s for found in pool.map(client, range(CLIENTS)) for s in found]
        finally:
            peak = sampler.stop()
        after = _count_connections(app)

    print(
        f"PostgreSQL connections of one worker: peak {peak} over {sampler.samples} samples "
        f"({len(results)} requests from {CLIENTS} clients), {after} after the load; "
        f"bound {HOT_POOL} + {ORM_POOL}"
    )
    assert set(results) <= {200, 101}, sorted(set(results))
    assert peak <= HOT_POOL + ORM_POOL
    assert peak > 1  # the load did reach the database through both pools

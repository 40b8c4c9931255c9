"""Nothing is called that cannot be recorded: while the database is down and the ledger spool
cannot take a row (not writable, or its disk full), a request is refused with the spec's 503
before the provider call; /v1/health says so; the spool's counts leave rejected lines apart."""

from __future__ import annotations

import json

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from gateway_site.metrics import ScrapeTimeCollector
from licensing.ledger import spool
from licensing.ledger.actions import spool_replay
from licensing.ledger.spool import (
    SpoolProbe,
    spool_append,
    spool_depth,
    spool_rejected,
)
from licensing.models import Transaction
from tests.kit import wait_until
from tests.ledger_helpers import budget_for, entry_for, refusal_codes
from tests.processes import running_workers

pytestmark = pytest.mark.django_db(transaction=True)

UNAVAILABLE = {"error": {"message": "Service temporarily unavailable"}}
EMBEDDING = {"model": "text-embedding-3-large", "input": "a b c d e f g h i j"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def database_up():
    """Each test starts (and leaves the process) with the database known to be up."""
    spool.note_database_up()
    spool.probe.checked_at = None
    yield
    spool.note_database_up()
    spool.probe.checked_at = None


@pytest.fixture
def spool_settings(settings, tmp_path):
    """The spool where a regular file stands: no directory can be made there, not even by root
    (a chmod would not stop root)."""
    blocked = tmp_path / "spool-is-a-file"
    blocked.write_text("")
    settings.GATEWAY = {
        **settings.GATEWAY,
        "LEDGER_SPOOL_DIR": str(blocked),
        "LEDGER_SPOOL_PROBE_SECONDS": 5.0,
    }
    return settings


def _embeddings_calls(catalog) -> int:
    return sum(r.path == "/v1/embeddings" for r in catalog["direct"].requests)


# --- the probe --------------------------------------------------------------------------------


def test_probe_unwritable_directory_cached_by_the_clock(spool_settings, tmp_path):
    clock = Clock()
    probe = SpoolProbe(clock=clock)
    assert not probe.writable()
    assert "cannot write to" in probe.problem

    spool_settings.GATEWAY = {**spool_settings.GATEWAY, "LEDGER_SPOOL_DIR": str(tmp_path / "ok")}
    clock.now += 4.9
    assert not probe.writable()  # the answer is kept LEDGER_SPOOL_PROBE_SECONDS
    clock.now += 0.1
    assert probe.writable() and probe.problem == ""
    assert list((tmp_path / "ok").iterdir()) == []  # the probe leaves no file behind


def test_probe_full_disk(settings, tmp_path):
    settings.GATEWAY = {
        **settings.GATEWAY,
        "LEDGER_SPOOL_DIR": str(tmp_path / "spool"),
        "LEDGER_SPOOL_MIN_FREE_BYTES": 10**18,  # more than any disk here has free: "full"
    }
    probe = SpoolProbe(clock=Clock())
    assert not probe.writable()
    assert probe.problem.endswith(f"bytes free, {10**18} needed")


def test_refusal_only_while_the_database_is_down(spool_settings):
    assert not spool.spool_refuses()  # database up: the spool is not even looked at
    assert spool.probe.checked_at is None
    spool.note_database_down()
    assert spool.spool_refuses()
    spool.note_database_up()
    assert not spool.spool_refuses()


# --- the pipeline and /v1/health, in process ------------------------------------------------------


def test_refused_before_the_provider_call(spool_settings, catalog, client, make_license, make_key):
    """The database known down (as the outage path leaves it) and the spool unwritable: the
    spec's 503 and no provider call. (The database of this process is in fact up, so the
    refusal's own row is written, and that write tells the process the database is back.)"""
    headers = {"Authorization": f"Bearer {make_key(make_license(name='free'))}"}
    assert client.post("/v1/embeddings", json=EMBEDDING, headers=headers).status_code == 200
    calls = _embeddings_calls(catalog)

    spool.note_database_down()
    response = client.post("/v1/embeddings", json=EMBEDDING, headers=headers)
    assert (response.status_code, response.json()) == (503, UNAVAILABLE)
    assert _embeddings_calls(catalog) == calls
    assert refusal_codes() == ["ledger_unavailable"]
    row = Transaction.objects.get(error_code="ledger_unavailable")
    assert (row.status_code, row.outcome, row.credits) == (503, "failure", 0)

    # That refusal's row committed: the database is known up again, calls go through.
    response = client.post("/v1/embeddings", json=EMBEDDING, headers=headers)
    assert response.status_code == 200
    assert _embeddings_calls(catalog) == calls + 1


def test_stream_refused_before_the_provider_call(spool_settings, catalog, client, auth):
    spool.note_database_down()
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert (response.status_code, response.json()) == (503, UNAVAILABLE)
    assert not [r for r in catalog["direct"].requests if r.path == "/v1/chat/completions"]


def test_health_reports_an_unwritable_spool(spool_settings, client):
    response = client.get("/v1/health")
    assert response.status_code == 200  # the database answers: the worker still serves
    assert response.json() == {"status": "degraded", "database": "ok", "spool": "unwritable"}


# --- the spool's counts -------------------------------------------------------------------------


def test_waiting_count_leaves_rejected_lines_apart(settings, tmp_path, make_license, capsys):
    settings.GATEWAY = {**settings.GATEWAY, "LEDGER_SPOOL_DIR": str(tmp_path / "spool")}
    license = make_license(name="capped", limit=1_000)
    spool_append(entry=entry_for(license, "req-1"), budget=budget_for(license))
    (tmp_path / "spool" / "rejected.jsonl").write_bytes(b'{"entry": "torn"}\n{"entry": 2}\n')
    assert (spool_depth(), spool_rejected()) == (1, 2)
    assert spool.spool_pending()
    gauges = {f.name: f.samples[0].value for f in ScrapeTimeCollector().collect()}
    assert gauges == {
        "gateway_ledger_spool_entries": 1,
        "gateway_ledger_spool_rejected_entries": 2,
    }

    call_command("replay_ledger_spool")
    out, err = capsys.readouterr()
    assert "1 written, 0 already in the ledger, 0 waiting, 2 rejected" in out
    assert "2 entries the database refused are kept in" in err
    assert not spool.spool_pending()  # rejected lines do not keep a replayer looping
    assert Transaction.objects.get().request_id == "req-1"


# --- a real outage: two worker processes on PostgreSQL behind a proxy the test cuts ------------


@pytest.mark.slow
def test_outage_with_an_unwritable_or_full_spool(catalog, make_license, make_key, tmp_path):
    """Worker 0's spool is a file (cannot be written, whoever runs it), worker 1's disk is
    "full" (its free-space floor is above any disk's size). Once the database is cut and a
    ledger write has failed, each refuses before calling the provider; /v1/health says why."""
    if connection.vendor != "postgresql":
        pytest.skip("needs a PostgreSQL server to cut (the proxy sits between gateway and it)")
    from tests.tcpproxy import TcpProxy

    s = connection.settings_dict
    proxy = TcpProxy(int(s.get("PORT") or 5432), s.get("HOST") or "127.0.0.1")
    blocked = tmp_path / "spool-is-a-file"
    blocked.write_text("")
    spools = [blocked, tmp_path / "spool-full"]
    env = {
        "DATABASE_URL": f"postgres://{s['USER']}@127.0.0.1:{proxy.port}/{s['NAME']}",
        "GATEWAY_PG_POOL_TIMEOUT": "1",
        # The key and license stay cached through the outage, however slow the machine.
        "GATEWAY_CACHE_TTL": "600",
        "GATEWAY_INVALIDATION_FILE": str(tmp_path / "cache-generation"),
    }

    def worker_env(n):
        full = {"GATEWAY_LEDGER_SPOOL_MIN_FREE_BYTES": str(10**18)} if n == 1 else {}
        return {**env, "GATEWAY_LEDGER_SPOOL_DIR": str(spools[n]), **full}

    headers = {"Authorization": f"Bearer {make_key(make_license(name='free'))}"}

    def post(worker) -> httpx.Response:
        return worker.http.post("/v1/embeddings", json=EMBEDDING, headers=headers, timeout=30)

    try:
        with running_workers(2, tmp_path, env=worker_env) as workers:
            for worker in workers:
                assert worker.http.get("/v1/health").json()["spool"] == "unwritable"
                assert post(worker).status_code == 200  # key, license and catalog now cached
            proxy.cut()
            # The first call of the outage: nothing told the worker yet, the provider is called,
            # the ledger write fails; worker 0 cannot spool it (logged with its spool line).
            raced = [post(worker) for worker in workers]
            assert [r.status_code for r in raced] == [200, 200]
            calls = _embeddings_calls(catalog)
            for worker in workers:
                refused = post(worker)
                assert (refused.status_code, refused.json()) == (503, UNAVAILABLE)
                health = worker.http.get("/v1/health", timeout=30)
                assert health.status_code == 503
                assert health.json() == {
                    "status": "error",
                    "database": "unreachable",
                    "spool": "unwritable",
                }
            assert _embeddings_calls(catalog) == calls  # no call that could not be recorded
            proxy.restore()
            for worker in workers:
                # The pools reconnect in the background, with a back-off: a worker is back once
                # its health check reaches the database (what a load balancer waits for too).
                _wait_for_database(worker)
                assert post(worker).status_code == 200
            # Worker 1's disk was only "full" by its floor: its rows were spooled; let it
            # replay them before the workers stop.
            _wait_for_replay(spools[1])
            lost = [
                line
                for line in workers[0].http.get("/metrics").text.splitlines()
                if line.startswith("gateway_ledger_rows_lost_total")
            ]
            # The raced call, and the refusal's own row (no money in it).
            assert sorted(lost) == [
                'gateway_ledger_rows_lost_total{kind="call"} 1.0',
                'gateway_ledger_rows_lost_total{kind="refusal"} 1.0',
            ]
    finally:
        proxy.close()

    log = (tmp_path / "worker-0.log").read_text()
    lost_id = raced[0].headers["X-Request-Id"]
    assert f"ledger row of request {lost_id} LOST" in log
    assert not Transaction.objects.filter(request_id=lost_id).exists()
    # The log line is the spool line: an operator can replay it.
    logged = next(x for x in log.splitlines() if lost_id in x and "LOST" in x)
    assert json.loads(logged)["level"] == "CRITICAL"
    line = json.loads(logged)["message"].split("replay: ")[1]
    recovered = tmp_path / "recovered"
    recovered.mkdir()
    (recovered / "from-log.jsonl").write_text(line + "\n")
    with override_settings(GATEWAY={**settings.GATEWAY, "LEDGER_SPOOL_DIR": str(recovered)}):
        assert spool_replay() == (1, 0)
    row = Transaction.objects.get(request_id=lost_id)
    assert (row.status_code, row.credits) == (200, raced[0].json()["usage"]["credits_used"])
    # Every other provider call has its row (worker 1's raced one through its spool).
    assert Transaction.objects.filter(status_code=200).count() == _embeddings_calls(catalog)


def _wait_for_database(worker, timeout: float = 30) -> None:
    wait_until(
        lambda: worker.http.get("/v1/health", timeout=30).json()["database"] == "ok",
        timeout=timeout,
        every=0.1,
        what="the worker did not reach the database again",
    )


def _wait_for_replay(directory, timeout: float = 30) -> None:
    wait_until(
        lambda: (
            not any(p.suffix == ".jsonl" or ".replaying-" in p.name for p in directory.glob("*"))
        ),
        timeout=timeout,
        every=0.1,
        what="the spool was not replayed",
    )

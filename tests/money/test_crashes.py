"""SIGKILL at each step of the money path (core/crashpoints.py): a gateway worker (or the spool's
replay) killed there leaves nothing acknowledged unrecorded and nothing charged twice, and its
budget hold counts until it expires, then is released. PostgreSQL only (a real server to kill
workers against, and to cut behind a proxy)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection

from core import clock
from licensing.ledger.reservations import hold_for, release_expired
from licensing.ledger.spool import spool_append
from licensing.models import Transaction
from tests.kit import wait_until
from tests.money.test_reservations import (
    COST,
    EMBED,
    LIMIT,
    holds_left,
    ledger_sum,
    license_budget,
    price_embeddings,
    spent_of,
)
from tests.processes import database_url, running_workers

pytestmark = pytest.mark.slow  # gateway worker processes, killed
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def capped(transactional_db, catalog, make_license, make_key, tmp_path):
    """A license of 1,000 whose embeddings requests cost 100 each, its key, a spool folder."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: workers killed against a real server")
    price_embeddings()
    license = make_license(name="capped", limit=LIMIT, period="daily")
    return license, make_key(license), tmp_path / "spool"


def env_for(spool: Path, *points: str, **extra: str) -> dict[str, str]:
    return {"GATEWAY_LEDGER_SPOOL_DIR": str(spool), "GATEWAY_CRASH_POINTS": ",".join(points)} | (
        extra
    )


def post(worker, key: str) -> httpx.Response:
    return worker.http.post(
        "/v1/embeddings", headers={"Authorization": f"Bearer {key}"}, json=EMBED
    )


def killed(worker, key: str) -> None:
    """The request meets the armed point: the worker dies, the client gets no answer."""
    with pytest.raises(httpx.TransportError):
        post(worker, key)
    assert worker.proc.wait(10) == -9  # SIGKILL


def the_rest_answer(tmp_path, spool, key, expected: int) -> None:
    """A fresh worker serves the license to its limit: `expected` answers, then 400s."""
    with running_workers(1, tmp_path, env_for(spool)) as (worker,):
        statuses = [post(worker, key).status_code for _ in range(expected + 2)]
    assert statuses == [200] * expected + [400, 400], statuses


def after_expiry() -> int:
    """The sweep as it runs once the dead worker's holds expired."""
    return release_expired(now=clock.utcnow() + timedelta(seconds=901))


def test_killed_after_its_hold_the_hold_counts_until_it_expires(capped, tmp_path):
    license, key, spool = capped
    with running_workers(1, tmp_path, env_for(spool, "budget.held")) as (worker,):
        killed(worker, key)
    assert Transaction.objects.filter(license=license).count() == 0
    assert holds_left(license) == (COST, 1)  # nothing called, nothing charged: only the hold
    the_rest_answer(tmp_path, spool, key, 9)  # the dead worker's hold still counts
    assert after_expiry() == 1
    assert holds_left(license) == (0, 0)
    the_rest_answer(tmp_path, spool, key, 1)
    assert spent_of(license) == {"license": LIMIT} == {"license": ledger_sum(license=license)}


def test_killed_between_the_providers_answer_and_the_commit(capped, catalog, tmp_path):
    """The one window no write on our side closes: the provider answered, the process died
    before anything was durable. The client got no answer; the call is not in the ledger
    (docs/reliability.md says so); its hold expires. Nothing is charged twice."""
    license, key, spool = capped
    calls = len(catalog["direct"].requests)
    with running_workers(1, tmp_path, env_for(spool, "ledger.called")) as (worker,):
        killed(worker, key)
    assert len(catalog["direct"].requests) == calls + 1
    assert Transaction.objects.filter(license=license).count() == 0
    assert holds_left(license) == (COST, 1)
    assert after_expiry() == 1
    the_rest_answer(tmp_path, spool, key, 10)
    assert spent_of(license) == {"license": LIMIT} == {"license": ledger_sum(license=license)}


def test_killed_after_the_commit_the_row_is_charged_once(capped, tmp_path):
    """Committed, not answered: the row and its charge are in, the hold released with them;
    the client's retry (a new request) is a new row, and the wallet is its rows' sum."""
    license, key, spool = capped
    with running_workers(1, tmp_path, env_for(spool, "ledger.committed")) as (worker,):
        killed(worker, key)
    assert Transaction.objects.filter(license=license, credits=COST).count() == 1
    assert holds_left(license) == (0, 0)
    the_rest_answer(tmp_path, spool, key, 9)
    assert spent_of(license) == {"license": LIMIT} == {"license": ledger_sum(license=license)}


def test_killed_after_spooling_the_replay_writes_it_once(capped, catalog, tmp_path):
    """The database goes away during the provider call (the hold is in): the row goes to the
    spool, the worker dies before answering. The replay writes it once and releases its hold."""
    from tests.tcpproxy import TcpProxy

    license, key, spool = capped
    s = connection.settings_dict
    port = int(s.get("PORT") or 5432)
    proxy = TcpProxy(port, s.get("HOST") or "127.0.0.1")
    through_proxy = database_url().replace(f":{port}/", f":{proxy.port}/")
    env = env_for(spool, "spool.appended", DATABASE_URL=through_proxy)
    try:
        with running_workers(1, tmp_path, env) as (worker,):
            catalog["direct"].hold_next()
            answer: list[object] = []
            client = threading.Thread(target=lambda: answer.append(_try_post(worker, key)))
            client.start()
            wait_until(lambda: holds_left(license) == (COST, 1), what="the request's hold")
            wait_until(lambda: catalog["direct"].requests, what="the provider call")
            proxy.cut()
            catalog["direct"].release()
            client.join(30)
            assert isinstance(answer[0], httpx.TransportError), answer
            assert worker.proc.wait(10) == -9
    finally:
        proxy.close()
    assert Transaction.objects.filter(license=license).count() == 0
    assert holds_left(license) == (COST, 1)  # held until its row is written
    replay(spool)
    assert Transaction.objects.filter(license=license, credits=COST).count() == 1
    assert holds_left(license) == (0, 0)
    replay(spool)  # nothing left to write twice
    assert Transaction.objects.filter(license=license).count() == 1
    the_rest_answer(tmp_path, spool, key, 9)
    assert spent_of(license) == {"license": LIMIT} == {"license": ledger_sum(license=license)}


def test_a_replay_killed_after_a_line_is_done_again_without_doubling(capped):
    """Three spooled rows with their holds; the replay dies after the first line's commit (its
    file stays); the next replay skips that row by its request id and writes the others."""
    license, _, spool = capped
    from licensing.ledger.budget import budget_check
    from tests.ledger_helpers import entry_for

    config = license_budget(license)
    for n, credits in enumerate((120, 80, 100)):
        request_id = f"spooled-{n}"
        state = budget_check(
            license_id=license.id, config=config, holder="license", hold=hold_for(request_id, COST)
        )
        spool.mkdir(exist_ok=True)
        _spool_in(spool, entry_for(license, request_id, credits=credits), state)
    assert holds_left(license) == (3 * COST, 3)
    first = replay(spool, "spool.replayed")
    assert first.returncode == -9, first.stdout
    assert Transaction.objects.filter(license=license).count() == 1
    assert holds_left(license) == (2 * COST, 2)
    assert replay(spool).returncode == 0
    assert Transaction.objects.filter(license=license).count() == 3
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 300} == {"license": ledger_sum(license=license)}


# --- helpers ----------------------------------------------------------------------------------


def _try_post(worker, key: str) -> object:
    try:
        return post(worker, key)
    except httpx.TransportError as exc:
        return exc


def _spool_in(spool: Path, entry, state) -> None:
    from django.conf import settings
    from django.test import override_settings

    with override_settings(GATEWAY={**settings.GATEWAY, "LEDGER_SPOOL_DIR": str(spool)}):
        spool_append(entry=entry, budget=state)


def replay(spool: Path, *points: str) -> subprocess.CompletedProcess:
    """`manage.py replay_ledger_spool`, the operator's command, in a process of its own."""
    env = {**os.environ, "DATABASE_URL": database_url(), **env_for(spool, *points)}
    return subprocess.run(
        [sys.executable, "manage.py", "replay_ledger_spool"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

"""SIGKILL at each step of the money path (core/crashpoints.py): a gateway worker (or the spool's
replay) killed there leaves nothing acknowledged unrecorded and nothing charged twice, and its
budget hold counts until it expires, then is released. A busy wallet's lease
(licensing.ledger.leases) too: killed after taking it, under it before or after a row's commit,
and inside its close, the lease's row (or the holds its close gave) counts until it expires, and
the wallet is then exactly its rows' sum. PostgreSQL only (a real server to kill workers against,
and to cut behind a proxy)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection

from core import clock
from licensing.ledger.budget import budget_check
from licensing.ledger.leases import LEASE_HOLDS, LEASE_PREFIX
from licensing.ledger.reservations import hold_for, release_expired, release_request
from licensing.ledger.spool import spool_append
from licensing.models import Reservation, Transaction
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
ROOMY = 10_000_000  # leases: one is 128 holds (12,800), granted while 4 of them (51,200) are left
LEASE = LEASE_HOLDS * COST
OPEN_LONG = "60"  # a lease's window (seconds) that outlives the test: it ends by the kill
CLOSES_SOON = "1"  # one that ends in the test: its close kills the worker (the test waits for that)


@pytest.fixture
def capped(transactional_db, catalog, make_license, make_key, tmp_path):
    """A license of 1,000 whose embeddings requests cost 100 each, its key, a spool folder."""
    return _priced(make_license, make_key, tmp_path, "capped", LIMIT)


@pytest.fixture
def roomy(transactional_db, catalog, make_license, make_key, tmp_path):
    """`capped` with room to lease: a license of 10,000,000 (`capped` never leases)."""
    return _priced(make_license, make_key, tmp_path, "roomy", ROOMY)


def _priced(make_license, make_key, tmp_path, name: str, limit: int):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: workers killed against a real server")
    price_embeddings()
    license = make_license(name=name, limit=limit, period="daily")
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


# --- a busy wallet's lease -------------------------------------------------------------------
# A worker's first request on a wallet holds through the ORM (the wallet's id is learnt), its
# second by a statement of its own (the wallet is now busy: its window starts), and the third
# within the window takes the lease; those after it are admitted under it in memory.


def test_killed_after_taking_a_lease_the_lease_counts_until_it_expires(roomy, catalog, tmp_path):
    """The lease's taker dies before its provider call: the lease's row counts, nothing is
    charged. So that the worker's first `budget.held` is the lease's, the two requests before it
    are refused (a hold of the whole budget, released then): they reach no crash point."""
    license, key, spool = roomy
    calls = len(catalog["direct"].requests)
    whole = hold_for("the-whole-budget", ROOMY)
    config = license_budget(license)
    budget_check(license_id=license.id, config=config, holder="license", hold=whole)
    with running_workers(1, tmp_path, leasing(spool, "budget.held", OPEN_LONG)) as (worker,):
        assert [post(worker, key).status_code for _ in range(2)] == [400, 400]
        release_request(whole.request_id)
        killed(worker, key)
    assert len(catalog["direct"].requests) == calls  # nothing called
    assert lease_rows(license) == [LEASE]
    assert ledger_sum(license=license) == 0 and spent_of(license) == {"license": 0}
    counted_until_they_expire(license, (LEASE, 1))
    served_exactly(tmp_path, spool, key, license)


def test_killed_under_a_lease_between_the_providers_answer_and_the_commit(roomy, catalog, tmp_path):
    """A request admitted under the lease in memory (no statement of its own) is answered by
    the provider, and its worker dies before the row: nothing charged; the lease's row and the
    holds of the requests still in flight count until they expire."""
    license, key, spool = roomy
    fake = catalog["direct"]
    calls = len(fake.requests)
    killed_under_a_lease(tmp_path, spool, "ledger.called", key, fake)
    assert len(fake.requests) == calls + 4
    assert Transaction.objects.filter(license=license).count() == 0
    assert lease_rows(license) == [LEASE]
    counted_until_they_expire(license, (2 * COST + LEASE, 3))
    served_exactly(tmp_path, spool, key, license)


def test_killed_under_a_lease_after_the_commit_the_row_is_charged_once(roomy, catalog, tmp_path):
    """Its row is committed (charged once), not answered: the lease's row, which still counts
    it (twice meanwhile: never too little), stays until it expires, and the wallet is then
    exactly its rows' sum."""
    license, key, spool = roomy
    killed_under_a_lease(tmp_path, spool, "ledger.committed", key, catalog["direct"])
    assert Transaction.objects.filter(license=license, credits=COST).count() == 1
    assert spent_of(license) == {"license": COST} == {"license": ledger_sum(license=license)}
    assert lease_rows(license) == [LEASE]
    counted_until_they_expire(license, (2 * COST + LEASE, 3))
    served_exactly(tmp_path, spool, key, license)


def test_killed_before_a_lease_closes_its_row_expires(roomy, catalog, tmp_path):
    """The window ends with a request admitted under the lease still at the provider; the
    worker dies before the close's statement: the lease's row stays (counting that request)
    and expires with the other request's own hold."""
    license, key, spool = roomy
    killed_in_the_close(tmp_path, spool, "lease.closing", key, catalog["direct"])
    assert lease_rows(license) == [LEASE]
    assert spent_of(license) == {"license": COST}  # the first request's, before the lease
    counted_until_they_expire(license, (COST + LEASE, 2))
    served_exactly(tmp_path, spool, key, license)


def test_killed_after_a_lease_closed_its_request_in_flight_holds_until_it_expires(
    roomy, catalog, tmp_path
):
    """The close is committed with a request admitted under the lease still at the provider:
    the lease's row and amount are gone, that request has a hold row of its own (the close's),
    and it expires with the other request's own hold, its worker dead."""
    license, key, spool = roomy
    killed_in_the_close(tmp_path, spool, "lease.closed", key, catalog["direct"])
    assert lease_rows(license) == []
    assert spent_of(license) == {"license": COST}
    counted_until_they_expire(license, (2 * COST, 2))  # two holds of a request each
    served_exactly(tmp_path, spool, key, license)


def test_a_worker_stopped_cleanly_leaves_no_lease(roomy, tmp_path):
    """SIGTERM (a deploy, a scale-down) is no death: the worker's requests end and their rows
    are written, and its open lease closes too, rather than being counted on `reserved` for
    GATEWAY_BUDGET_RESERVATION_SECONDS by nobody alive (a refusal near the limit meanwhile)."""
    license, key, spool = roomy
    env = env_for(spool, GATEWAY_BUDGET_LEASE_SECONDS=OPEN_LONG)
    with running_workers(1, tmp_path, env) as (worker,):
        assert [post(worker, key).status_code for _ in range(3)] == [200] * 3
        assert lease_rows(license) == [LEASE]
    assert holds_left(license) == (0, 0)


# --- helpers ----------------------------------------------------------------------------------


def leasing(spool: Path, point: str, window: str) -> dict[str, str]:
    return env_for(spool, point, GATEWAY_BUDGET_LEASE_SECONDS=window)


def killed_under_a_lease(tmp_path, spool, point: str, key: str, fake) -> None:
    """The first three requests held at the provider (one through the ORM; then two at once:
    one holds by itself, one takes the lease), so that no row reaches the ledger before the
    fourth's, admitted under the lease: its worker dies at `point` while writing it."""
    env = leasing(spool, point, OPEN_LONG)
    with running_workers(1, tmp_path, env) as (worker,), held_at_the_provider(fake) as pool:
        first = sent(pool, worker, key, 1)
        wait_until(lambda: fake.holding == 1, what="the first request at the provider")
        pair = sent(pool, worker, key, 2)
        wait_until(lambda: fake.holding == 3, what="the two requests at the provider")
        fake.hold_when(None)  # the fourth is answered
        killed(worker, key)
        assert cut_off(first + pair)


def killed_in_the_close(tmp_path, spool, point: str, key: str, fake) -> None:
    """One request answered (through the ORM), then two at once that the provider holds: one
    holds by itself, the other takes a lease; the lease's window ends and its close kills the
    worker at `point`, the lease's request still in flight (a death the test waits for)."""
    env = leasing(spool, point, CLOSES_SOON)
    with running_workers(1, tmp_path, env) as (worker,):
        assert post(worker, key).status_code == 200
        with held_at_the_provider(fake) as pool:
            pair = sent(pool, worker, key, 2)
            assert worker.proc.wait(30) == -9  # SIGKILL, by the close (its timer, in the worker)
            assert cut_off(pair)


@contextmanager
def held_at_the_provider(fake) -> Iterator[ThreadPoolExecutor]:
    """The provider holds every request (unanswered) until the block ends, whatever happened;
    threads to send them from."""
    assert fake.holding == 0
    fake.hold_when(lambda _request: True)
    pool = ThreadPoolExecutor(4)
    try:
        yield pool
    finally:
        fake.hold_when(None)
        fake.release()
        pool.shutdown(wait=True)


def sent(pool: ThreadPoolExecutor, worker, key: str, count: int) -> list[Future]:
    """`count` requests sent at once: their answers (or transport errors) to come."""
    return [pool.submit(_try_post, worker, key) for _ in range(count)]


def cut_off(sent: list[Future]) -> bool:
    """Every request in flight died with its worker: no answer."""
    return all(isinstance(future.result(30), httpx.TransportError) for future in sent)


def lease_rows(license) -> list[int]:
    found = Reservation.objects.filter(wallet__license=license, request_id__startswith=LEASE_PREFIX)
    return list(found.values_list("amount", flat=True))


def counted_until_they_expire(license, held: tuple[int, int]) -> None:
    """The dead worker's lease and holds (`held`: their sum, their rows) count on `reserved`
    until they expire: the sweep leaves them until then, and releases them all after."""
    assert holds_left(license) == held
    assert release_expired() == 0
    assert holds_left(license) == held
    assert after_expiry() == held[1]
    assert holds_left(license) == (0, 0)


def served_exactly(tmp_path, spool, key: str, license) -> None:
    """A fresh worker serves the license (two requests: each holds by itself, no lease, so its
    clean stop leaves nothing held), and the wallet is exactly its rows' sum."""
    with running_workers(1, tmp_path, env_for(spool)) as (worker,):
        assert [post(worker, key).status_code for _ in range(2)] == [200, 200]
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": ledger_sum(license=license)}


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

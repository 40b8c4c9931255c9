"""Leases of a busy wallet (licensing.ledger.leases): one hold many requests are admitted under
in memory. The wallet's `spent + reserved` still counts every admitted request; the close hands
what is in flight hold rows of their own, a row handed over while its lease closes waits for the
close, a client that leaves is dropped in memory, no lease is taken near the limit, and a
refusal waits for the leases in their window. On two worker processes the charges are exact.
The crash tests (SIGKILL at each step) are in test_crashes.py."""

from __future__ import annotations

import asyncio

import pytest
from django.db.models import F

from core import clock, pgpool
from core.errors import OUT_OF_BUDGET, BadRequest
from licensing.ledger import leases
from licensing.ledger.actions import transaction_record
from licensing.ledger.budget import BudgetState, budget_check, budget_check_async
from licensing.ledger.leases import LEASE_HOLDS, LEASE_PREFIX, release_held
from licensing.ledger.reservations import hold_for
from licensing.models import Reservation, Transaction, Wallet
from tests.kit import wait_until
from tests.ledger_helpers import entry_for
from tests.money.test_course_budget import license_budget
from tests.money.test_reservations import (
    COST,
    EMBED,
    counting_statements,
    course_level,
    fire,
    holds_left,
    ledger_sum,
    price_embeddings,
    spent_of,
)

BIG = 10_000_000  # far from its limit: a lease of 128 holds of 100 fits with room for 3 more
LEASE = LEASE_HOLDS * COST

pytestmark = pytest.mark.skipif(
    not pgpool.available(), reason="leases are the async pool's (PostgreSQL)"
)


def _wallet_of(license) -> None:
    """Open the license's wallet (and cache its id: the async path holds on known wallets)."""
    budget_check(license_id=license.id, config=license_budget(license), holder="license")


async def _check(license, request_id: str) -> BudgetState:
    return await budget_check_async(
        license_id=license.id,
        config=license_budget(license),
        holder="license",
        hold=hold_for(request_id, COST),
    )


def _on_a_loop(steps, sent: list[str] | None = None):
    """Run `steps()` on a new loop with its own pool; (its result, the statements it sent)."""
    return counting_statements(steps, sent, noted=lambda sql, params: sql)


async def _close_now(lease) -> None:
    leases.leases().close_soon(lease)
    await lease.ended


def _lease_rows(license) -> list[int]:
    found = Reservation.objects.filter(wallet__license=license, request_id__startswith=LEASE_PREFIX)
    return list(found.values_list("amount", flat=True))


def test_a_busy_wallet_leases_and_admits_the_next_requests_in_memory(make_license):
    """The first request holds by itself; the second, within the window, takes a lease of
    LEASE_HOLDS holds; the eight after it are admitted under the lease with no statement. The
    close turns the eight and the second (none handed a ledger row over) into holds of their
    own: `reserved` counted them all along."""
    license = make_license(name="busy", limit=BIG, period="daily")
    _wallet_of(license)
    seen: dict = {}

    async def steps():
        states = [await _check(license, f"r{n}") for n in range(10)]
        seen["during"] = await asyncio.to_thread(holds_left, license)
        seen["leases"] = await asyncio.to_thread(_lease_rows, license)
        await _close_now(states[1].lease)
        return states

    states, sent = _on_a_loop(steps)
    assert states[0].lease is None and states[0].hold is not None
    assert {s.lease for s in states[1:]} == {states[1].lease} and states[1].lease is not None
    assert states[1].lease.used == 9 * COST
    assert len([sql for sql in sent if "FOR UPDATE" in sql]) == 2  # the hold, the lease
    assert seen["during"] == (COST + LEASE, 2) and seen["leases"] == [LEASE]
    assert holds_left(license) == (10 * COST, 10)  # the lease gone, each request's own hold
    assert _lease_rows(license) == []


def test_rows_written_before_the_close_are_charged_and_the_others_held(make_license):
    """Three under a lease: one's row is written while the lease is open (charged; it never
    had a hold row), the close holds the other two, whose rows then release their holds."""
    license = make_license(name="written", limit=BIG, period="daily")
    _wallet_of(license)

    async def steps():
        first = await _check(license, "alone")
        states = [await _check(license, f"w{n}") for n in range(3)]
        lease = states[0].lease
        assert lease is not None
        await _record(license, "w0", states[0])
        assert lease.writing == 0 and lease.pending.keys() == {"w1", "w2"}
        await _close_now(lease)
        held = await asyncio.to_thread(holds_left, license)
        for n in (1, 2):
            await _record(license, f"w{n}", states[n])
        await _record(license, "alone", first)
        return held

    held, _ = _on_a_loop(steps)
    assert held == (3 * COST, 3)  # "alone"'s, w1's and w2's
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 4 * 90} == {"license": ledger_sum(license=license)}


async def _record(license, request_id: str, state: BudgetState) -> None:
    entry = entry_for(license, request_id, credits=90)
    await transaction_record(entry=entry, budget=state, lease=state.lease)


async def _alone_then_two_under_a_lease(license):
    """The first request holds by itself; the next two, within the window, share a lease."""
    first = await _check(license, "alone")
    a, b = await _check(license, "a"), await _check(license, "b")
    assert a.lease is not None and b.lease is a.lease
    return first, a, b, a.lease


def test_a_row_handed_over_while_its_lease_closes_waits_for_the_close(make_license):
    """The close waits for the rows being written; a row handed over meanwhile waits for the
    close, which gives its request a hold row, and then releases it: no hold row is ever left
    behind a row that should have released it."""
    license = make_license(name="closing", limit=BIG, period="daily")
    _wallet_of(license)

    async def steps():
        first, a, b, lease = await _alone_then_two_under_a_lease(license)
        writing = asyncio.ensure_future(_record(license, "a", a))
        await asyncio.sleep(0)  # a's row handed over: the lease waits for its commit
        assert lease.writing == 1
        leases.leases().close_soon(lease)
        await _record(license, "b", b)  # waits for the close
        assert lease.ended.done()
        await writing
        await _record(license, "alone", first)

    _, sent = _on_a_loop(steps)
    close = next(n for n, sql in enumerate(sent) if "json_to_recordset" in sql and "UPDATE" in sql)
    inserts = [n for n, sql in enumerate(sent) if "INSERT INTO" in sql and "transaction" in sql]
    assert len(inserts) == 3 and inserts[0] < close < inserts[1]  # a's, the close, b's
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 270} == {"license": ledger_sum(license=license)}


def test_a_client_that_leaves_under_an_open_lease_is_dropped_in_memory(make_license):
    license = make_license(name="left", limit=BIG, period="daily")
    _wallet_of(license)

    async def steps():
        first, a, b, lease = await _alone_then_two_under_a_lease(license)
        sent_before = len(sent)
        await release_held(b.lease, "b")
        assert len(sent) == sent_before and lease.used == COST
        await _close_now(lease)
        await release_held(a.lease, "a")  # the lease has closed: a's hold row is released
        await release_held(first.lease, "alone")

    sent: list[str] = []
    _on_a_loop(steps, sent)
    assert holds_left(license) == (0, 0)
    assert Transaction.objects.filter(license=license).count() == 0


def test_near_the_limit_each_request_holds_by_itself(make_license):
    """A lease is granted only while the wallet keeps LEASE_MARGIN leases' worth: on 1,000
    every request holds by itself, so the exact refusals of small allowances stay."""
    license = make_license(name="small", limit=1_000, period="daily")
    _wallet_of(license)

    async def steps():
        return [await _check(license, f"s{n}") for n in range(10)]

    states, sent = _on_a_loop(steps)
    assert all(s.lease is None and s.hold is not None for s in states)
    assert _lease_rows(license) == [] and holds_left(license) == (1_000, 10)


def _another_workers_lease(license, amount: int, ends_in: float) -> str:
    """A lease row as another worker leaves it: its window ends `ends_in` seconds from now."""
    wallet = Wallet.objects.get(license=license)
    ends = int((clock.utcnow().timestamp() + ends_in) * 1000)
    request_id = f"{LEASE_PREFIX}{ends:013d}:other"
    hold = hold_for(request_id, amount)
    Reservation.objects.create(
        wallet=wallet, request_id=request_id, amount=amount, expires_at=hold.expires_at
    )
    Wallet.objects.filter(pk=wallet.pk).update(reserved=F("reserved") + amount)
    return request_id


def _other_worker_closes(request_id: str) -> None:
    row = Reservation.objects.get(request_id=request_id)
    Wallet.objects.filter(pk=row.wallet_id).update(reserved=F("reserved") - row.amount)
    row.delete()


def test_a_refusal_waits_for_another_workers_open_lease_and_is_decided_again(make_license):
    """Another worker's lease fills the wallet: the hold does not fit, so it waits for the lease
    to close (the other worker closes it at the end of its window) and then fits."""
    license = make_license(name="waits", limit=50 * COST, period="daily")
    _wallet_of(license)
    other = _another_workers_lease(license, 50 * COST, ends_in=0.5)

    async def steps():
        checking = asyncio.ensure_future(_check(license, "waiting"))
        while not checking.done() and not any("left(request_id" in sql for sql in sent):
            await asyncio.sleep(0.01)  # the refusal is looking at the open leases
        await asyncio.to_thread(_other_worker_closes, other)
        return await checking

    sent: list[str] = []
    state, _ = _on_a_loop(steps, sent)
    assert state.hold is not None and state.lease is None
    assert holds_left(license) == (COST, 1)


def test_a_dead_workers_lease_refuses_at_once_until_it_expires(make_license):
    """A lease whose window (and its grace) passed belongs to a worker that died: it counts
    until it expires, like that worker's holds, and the refusal does not wait for it."""
    license = make_license(name="dead lease", limit=50 * COST, period="daily")
    _wallet_of(license)
    _another_workers_lease(license, 50 * COST, ends_in=-5)

    async def steps():
        with pytest.raises(BadRequest) as refused:
            await _check(license, "refused")
        return refused.value

    refused, sent = _on_a_loop(steps)
    assert refused.message == OUT_OF_BUDGET
    assert len([sql for sql in sent if "left(request_id" in sql]) == 1  # looked once, no wait
    assert holds_left(license) == (50 * COST, 1)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["license", "course pool"])
def test_leased_wallets_charge_exactly_on_two_workers(
    level, transactional_db, tmp_path, catalog, make_license, make_key
):
    """Two workers, 700 embeddings requests of 100 in waves of 35 on 60,000 (the license's
    wallet, or a course pool shared by 3 students on an unlimited license): leases while far
    from the limit, holds near it, refusals after waiting for the leases. Exactly 600 answer,
    and the wallet is charged 60,000, its ledger's sum."""
    from tests.processes import running_workers

    price_embeddings()
    if level == "license":
        license = make_license(name="waves", limit=600 * COST, period="daily")
        keys, holder = [make_key(license)], "license"
    else:
        license, keys, holder = course_level(
            make_license, make_key, "waves", pool=600 * COST, students=3
        )
    with running_workers(2, tmp_path) as workers:
        urls = [w.url for w in workers]
        answers = []
        for _ in range(20):
            answers += fire(urls, keys, "/v1/embeddings", EMBED, 35)
        wait_until(lambda: holds_left(license) == (0, 0), timeout=10, what="leases closing")
    statuses = [r.status_code for r in answers]
    assert statuses.count(200) == 600 and statuses.count(400) == 100, set(statuses)
    assert spent_of(license)[holder] == 600 * COST == ledger_sum(license=license)


def test_a_refusal_on_the_orms_path_waits_for_open_leases_too(make_license, monkeypatch):
    """The first request of a window (its wallet not known to the worker yet) is held through
    the ORM on a thread: refused there while another worker's lease is open, it waits the same
    way (here: the other worker closes its lease while the refusal waits) and then fits. It
    waits on the event loop, not on the thread: the ORM's threads serve every license, and one
    license's refusals must not hold them."""
    import threading

    from core.localcache import clear_all

    license = make_license(name="waits on a thread", limit=50 * COST, period="daily")
    _wallet_of(license)
    other = _another_workers_lease(license, 50 * COST, ends_in=0.5)
    waits: list[tuple[float, bool]] = []
    thread_sleeps: list[float] = []

    sleep = asyncio.sleep  # the other loops' (the pools' own) sleep as they did

    async def closes_meanwhile(seconds: float) -> None:
        if seconds != leases.WAIT_POLL:
            return await sleep(seconds)
        waits.append((seconds, threading.current_thread() is threading.main_thread()))
        await asyncio.to_thread(_other_worker_closes, other)

    monkeypatch.setattr(leases.asyncio, "sleep", closes_meanwhile)
    monkeypatch.setattr(leases.time, "sleep", thread_sleeps.append)
    clear_all()  # the wallet's id forgotten: the ORM's path
    state, _ = _on_a_loop(lambda: _check(license, "waiting"))
    assert waits == [(leases.WAIT_POLL, True)] and thread_sleeps == []
    assert state.hold is not None and holds_left(license) == (COST, 1)


def test_a_refusal_on_the_orms_path_past_the_leases_window_is_refused(make_license, monkeypatch):
    """The same refusal once the other worker's lease outlives its window and grace (its worker
    died): the loop waits no more, the hold is decided again once, and refused."""
    from core.localcache import clear_all

    license = make_license(name="refused on a thread", limit=50 * COST, period="daily")
    _wallet_of(license)
    _another_workers_lease(license, 50 * COST, ends_in=-leases.GRACE - 1)
    clear_all()
    with pytest.raises(BadRequest):
        _on_a_loop(lambda: _check(license, "refused"))
    assert holds_left(license) == (50 * COST, 1)


def test_a_course_pool_alone_leases_like_a_license(make_license, make_key):
    """A course member's request on an unlimited license with a course pool (no allowance):
    the pool is its one limited level, and it leases like a license's wallet."""
    from tests.money.test_course_budget import make_course, member_key

    license = make_license(name="pooled course", period="daily")  # unlimited
    course = make_course(license, pool=BIG, code="POOL")
    _, student = member_key(make_key, course)
    holder = f"user:{student.id}"

    def check(request_id: str):
        return budget_check_async(
            license_id=license.id,
            config=license_budget(license),
            holder=holder,
            course_id=course.id,
            end_user_id=student.id,
            hold=hold_for(request_id, COST),
        )

    budget_check(
        license_id=license.id,
        config=license_budget(license),
        holder=holder,
        course_id=course.id,
        end_user_id=student.id,
    )

    async def steps():
        states = [await check(f"p{n}") for n in range(4)]
        await _close_now(states[1].lease)
        return states

    states, _ = _on_a_loop(steps)
    assert states[0].lease is None and states[1].lease is not None
    assert {s.lease for s in states[1:]} == {states[1].lease}
    assert holds_left(license) == (4 * COST, 4)  # each request's own hold, on the pool

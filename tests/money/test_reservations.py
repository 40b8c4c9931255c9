"""Budgets that hold: a request reserves what it is sure to cost at the budget step and is
admitted only while `spent + reserved < limit` at every level (licensing.ledger.reservations,
docs/decisions/money-path-log.md). 30 requests of 100 at once on 1,000 answer 10, on every
level, on two worker processes; the holds are released by the charge, by a refusal's row, by a
client that leaves, by the spool's replay, and by their expiry when a worker died."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from django.db import connection
from django.db.models import Sum

from catalog.models import Model
from core import clock, pgpool
from core.errors import OUT_OF_BUDGET
from core.localcache import clear_all
from inference import tokens
from inference.billing import Usage, credits_for
from inference.endpoints.images import ImageGeneration
from inference.endpoints.search import Fetch, WebSearch
from inference.schemas.images import ImageGenerationRequest
from inference.schemas.search import FetchRequest, WebSearchRequest
from licensing.ledger.actions import transaction_record, transaction_record_once
from licensing.ledger.budget import budget_check, wallet_key
from licensing.ledger.reservations import hold_for, release_expired
from licensing.models import ApiKey, Reservation, Transaction, Wallet
from tests.kit import drain_background_writes, wait_until
from tests.ledger_helpers import entry_for
from tests.money.test_course_budget import license_budget, make_course, member_key
from tests.processes import database_url

SMALL = "text-embedding-3-small"
EMBED = {"model": SMALL, "input": "a few words to embed", "encoding_format": "float"}
MINI = "gpt-4o-mini"
CHAT = {"model": MINI, "messages": [{"role": "user", "content": "tell me a joke"}]}
COST = 100  # micro-credits a request reserves
LIMIT = 1_000  # at most 10 such requests fit
AT_ONCE = 30


def price_embeddings() -> None:
    """5 input tokens (the gateway's count and the fake's) at 20: 100 a request, known."""
    assert tokens.count_text(EMBED["input"], SMALL) == 5
    Model.objects.filter(model_id=SMALL).update(cost={"type": "per_token", "prompt": 20})
    clear_all()


def price_chat() -> int:
    """The prompt reserves 100; the completion comes on top (its cost unknown before)."""
    prompt = tokens.chat_prompt_tokens(CHAT, tokens.ROUGH)  # as the hold counts it
    assert COST % prompt == 0, prompt
    cost = {"type": "per_token", "prompt": COST // prompt, "completion": 20}
    Model.objects.filter(model_id=MINI).update(cost=cost)
    clear_all()
    return credits_for(cost, Usage(prompt_tokens=prompt))


def holds_left(license) -> tuple[int, int]:
    """(the license's wallets' `reserved` summed, its Reservation rows)."""
    wallets = Wallet.objects.filter(license=license)
    reserved = wallets.aggregate(s=Sum("reserved"))["s"] or 0
    return reserved, Reservation.objects.filter(wallet__in=wallets).count()


def spent_of(license) -> dict[str, int]:
    return dict(Wallet.objects.filter(license=license).values_list("holder", "spent"))


def ledger_sum(**filters) -> int:
    return Transaction.objects.filter(**filters).aggregate(s=Sum("credits"))["s"] or 0


# --- the levels a request pays at -------------------------------------------------------------


def license_level(make_license, make_key, name, strategy):
    license = make_license(name=name, limit=LIMIT, period="daily", strategy=strategy)
    key = make_key(license)
    holder = "license" if strategy == "pooled" else f"key:{ApiKey.objects.get(license=license).id}"
    return license, [key], holder


def course_level(make_license, make_key, name, *, allowance=None, pool=None, students=1):
    license = make_license(name=name, period="daily")  # unlimited: the course's level holds
    course = make_course(license, allowance=allowance, pool=pool, code=name)
    members = [member_key(make_key, course, subject=f"{name}-{n}") for n in range(students)]
    keys = [key for key, _ in members]
    if pool is not None:
        return license, keys, f"course:{course.id}"
    return license, keys, f"course:{course.id}:user:{members[0][1].id}"


def the_levels(make_license, make_key) -> dict[str, tuple]:
    """Each level with the limit of 1,000 on its own license: the license's pooled wallet, a
    key's own (per_user), a student's course allowance, a course pool shared by 3 students."""
    return {
        "license": license_level(make_license, make_key, "pooled", "pooled"),
        "per key": license_level(make_license, make_key, "per-key", "per_user"),
        "allowance": course_level(make_license, make_key, "allowance", allowance=LIMIT),
        "pool": course_level(make_license, make_key, "pool", pool=LIMIT, students=3),
    }


def fire(urls: list[str], keys: list[str], path: str, body: dict, count: int):
    """`count` requests at once, spread over the workers and the keys."""
    clients = [httpx.Client(base_url=url, timeout=30) for url in urls]
    try:

        def one(n):
            headers = {"Authorization": f"Bearer {keys[n % len(keys)]}"}
            return clients[n % len(clients)].post(path, headers=headers, json=body)

        with ThreadPoolExecutor(count) as pool:
            return list(pool.map(one, range(count)))
    finally:
        for client in clients:
            client.close()


def check_level(name, license, holder, answers, *, at_most: int) -> list[httpx.Response]:
    ok = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code == 400]
    assert len(ok) + len(refused) == len(answers), (name, {r.status_code for r in answers})
    assert 1 <= len(ok) <= at_most, (name, len(ok))
    assert {r.json()["error"]["message"] for r in refused} == {OUT_OF_BUDGET}, name
    charged = Transaction.objects.filter(license=license, credits__gt=0)
    assert {r.headers["X-Request-Id"] for r in ok} == set(
        charged.values_list("request_id", flat=True)
    ), name
    billed = sum(r.json()["usage"]["credits_used"] for r in ok)
    assert spent_of(license)[holder] == ledger_sum(license=license) == billed, name
    assert holds_left(license) == (0, 0), name  # every hold released with its charge
    refusals = Transaction.objects.filter(license=license, error_code="out_of_budget")
    assert refusals.count() == len(refused), name
    return ok


# --- two worker processes on PostgreSQL ---------------------------------------------------------


@pytest.fixture
def priced_workers(transactional_db, tmp_path, catalog):
    """Two gateway workers, started after the prices are set (they read the catalog once)."""
    from tests.processes import running_workers

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    price_embeddings()
    chat_hold = price_chat()
    with running_workers(2, tmp_path) as workers:
        yield [w.url for w in workers], chat_hold


@pytest.mark.slow
def test_thirty_at_once_answer_ten_on_every_level(priced_workers, make_license, make_key):
    """The issue's case: 30 embeddings requests of 100 at once on 1,000 got 21 answers and
    were charged 2,100; now each level answers 10 and is charged 1,000, not a credit more."""
    urls, _ = priced_workers
    for name, (license, keys, holder) in the_levels(make_license, make_key).items():
        answers = fire(urls, keys, "/v1/embeddings", EMBED, AT_ONCE)
        ok = check_level(name, license, holder, answers, at_most=10)
        assert len(ok) == 10 and spent_of(license)[holder] == LIMIT, name


@pytest.mark.slow
def test_chat_holds_its_prompt_and_overshoots_by_completions_only(
    priced_workers, make_license, make_key
):
    """A chat request holds its prompt (100): at most 10 are admitted at every level, and the
    wallet ends above its limit only by what the admitted answers' completions cost."""
    urls, chat_hold = priced_workers
    assert chat_hold == COST
    for name, (license, keys, holder) in the_levels(make_license, make_key).items():
        answers = fire(urls, keys, "/v1/chat/completions", CHAT, AT_ONCE)
        # Each answer costs more than its hold (the fake's prompt of 4 words at 10, and 5
        # completion tokens at 20: 140), so each admission adds at least its hold for good.
        ok = check_level(name, license, holder, answers, at_most=10)
        costs = [r.json()["usage"]["credits_used"] for r in ok]
        assert min(costs) > COST, costs
        # Every admission saw spent + reserved < limit: the wallet ends past it by less than
        # one hold and what the answers cost beyond their holds (not 30 answers' worth).
        beyond = sum(cost - COST for cost in costs)
        assert LIMIT <= spent_of(license)[holder] < LIMIT + COST + beyond, name


# --- one process, both databases ------------------------------------------------------------


def test_thirty_at_once_answer_ten_in_one_process(catalog, client, make_license, make_key):
    """The same on the embedded default (SQLite: the ORM's path) and on PostgreSQL in one
    process (the async pool's)."""
    price_embeddings()
    license, keys, holder = license_level(make_license, make_key, "one", "pooled")
    url = str(client.base_url)
    ok = check_level(
        "one", license, holder, fire([url], keys, "/v1/embeddings", EMBED, 30), at_most=10
    )
    assert len(ok) == 10 and spent_of(license)["license"] == LIMIT


def test_a_refusal_after_the_budget_step_releases_the_hold(catalog, client, make_license, make_key):
    price_embeddings()
    license = make_license(name="denied", limit=LIMIT, period="daily")
    license.license_type.policy = {"version": 1, "services": {"chat_completions": {}}}
    license.license_type.save()
    clear_all()
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    for _ in range(12):  # more than 10: a leaked hold would refuse the last ones for budget
        answer = client.post("/v1/embeddings", headers=headers, json=EMBED)
        assert answer.status_code == 403, answer.text
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 0}


def test_a_client_that_leaves_before_the_call_takes_its_hold_along(
    catalog, client, make_license, make_key
):
    """The client hangs up while its input is moderated (step 8): no ledger row will release
    the hold, so the request's clean-up does."""
    price_embeddings()
    license = make_license(name="gone", limit=LIMIT, period="daily")
    license.license_type.guardrails = {"input": {"moderation": True}, "output": {}}
    license.license_type.save()
    clear_all()
    catalog["direct"].hang_next(30)
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/embeddings", headers=headers, json=EMBED, timeout=0.5)
    deadline = time.monotonic() + 10  # the gateway notices the hang-up on its own schedule
    while holds_left(license) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 0}


def _raw_embeddings(key: str) -> bytes:
    body = json.dumps(EMBED).encode()
    return (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _in_flight() -> float | None:
    """The gateway's requests in flight, as a scrape would read them (its batch written)."""
    from prometheus_client import REGISTRY

    from core import metrics

    metrics.flush()
    return REGISTRY.get_sample_value("gateway_requests_in_flight")


@pytest.mark.parametrize("level", ["license", "course member"])
def test_a_client_that_leaves_while_its_own_hold_waits_for_the_row_takes_it_along(
    level, catalog, client, make_license, make_key
):
    """The client hangs up while its hold's statement, sent from its own request, waits for the
    license wallet's row (locked here, as a long charge would): the request ends before the
    budget step answers, so it never sees its hold. psycopg cancels the statement on the server
    before the request ends (had it committed just before, the release sent after it would take
    it), so nothing is held, not until its expiry 15 minutes later either. On the license's own
    wallet and on a course member's levels (the license's and the allowance's, one statement)."""
    if connection.vendor != "postgresql":
        pytest.skip("the hold waits for a row lock: PostgreSQL's async pool")
    price_embeddings()
    license = make_license(name=f"left waiting, {level}", limit=LIMIT, period="daily")
    if level == "course member":
        course = make_course(license, allowance=LIMIT, code="left")
        key, _ = member_key(make_key, course, subject="left-student")
    else:
        key = make_key(license)
    headers = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    wallet = Wallet.objects.get(license=license, holder="license")  # known to the gateway now
    with psycopg.connect(database_url(), autocommit=False) as locker:
        table = Wallet._meta.db_table
        locker.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [wallet.id])
        with socket.create_connection((client.base_url.host, client.base_url.port)) as sock:
            sock.sendall(_raw_embeddings(key))
            wait_until(lambda: _holds_waiting_for_a_lock(locker) == 1, what="the hold waiting")
        # Hung up: the gateway cancels the request while its hold still waits.
        wait_until(lambda: _in_flight() == 0, what="the gateway done with the request")
        assert _holds_waiting_for_a_lock(locker) == 0  # the statement was cancelled with it
        assert holds_left(license) == (0, 0)
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    drain_background_writes()
    assert holds_left(license) == (0, 0)
    assert set(spent_of(license).values()) == {2 * COST}  # two answers, at each level
    assert Transaction.objects.filter(license=license).count() == 2


def test_a_client_that_leaves_while_its_hold_waits_in_its_wallets_batch_takes_it_along(
    catalog, client, make_license, make_key, monkeypatch
):
    """A hold that arrives while another of its wallet's is in flight waits to go with the next
    batch, on the batch's task. Its client hangs up meanwhile: the batch still takes the hold
    once the row is free, and it is released as soon as it answers."""
    if connection.vendor != "postgresql":
        pytest.skip("the hold waits for a row lock: PostgreSQL's async pool")
    from licensing.ledger import reservations

    released: list[str] = []
    real = reservations.release_left

    async def recorded(request_id: str) -> None:
        await real(request_id)
        released.append(request_id)

    monkeypatch.setattr(reservations, "release_left", recorded)
    price_embeddings()
    license = make_license(name="left in a batch", limit=LIMIT, period="daily")
    key = make_key(license)
    headers = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    wallet = Wallet.objects.get(license=license, holder="license")
    address = (client.base_url.host, client.base_url.port)
    with psycopg.connect(database_url(), autocommit=False) as locker:
        table = Wallet._meta.db_table
        locker.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [wallet.id])
        with socket.create_connection(address) as first:
            first.sendall(_raw_embeddings(key))  # its own statement, waiting for the row
            wait_until(lambda: _holds_waiting_for_a_lock(locker) == 1, what="the first hold")
            with socket.create_connection(address) as second:
                second.sendall(_raw_embeddings(key))  # queued behind it, in the next batch
                wait_until(lambda: _in_flight() == 2, what="the second request in")
            wait_until(lambda: _in_flight() == 1, what="the second request gone")
            assert holds_left(license) == (0, 0)
        # The first request was cancelled too (its release finds nothing); the batch with the
        # second's hold goes, and waits for the row.
        wait_until(lambda: _holds_waiting_for_a_lock(locker) == 1, what="the batch waiting")
        wait_until(lambda: _in_flight() == 0, what="the gateway done with both")
        wait_until(lambda: len(released) == 1, what="the first request's release")
        assert holds_left(license) == (0, 0)
    # The row is free: the batch takes the second hold, and its release follows the answer.
    wait_until(lambda: len(released) == 2, what="the batch's hold released")
    drain_background_writes()
    assert holds_left(license) == (0, 0)
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    drain_background_writes()
    assert holds_left(license) == (0, 0)
    assert set(spent_of(license).values()) == {2 * COST}
    assert Transaction.objects.filter(license=license).count() == 2


def _holds_waiting_for_a_lock(conn) -> int:
    """Statements of this database waiting for a lock (the gateway's hold, on the row)."""
    rows = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    return rows[0]


def test_a_hold_of_a_dead_worker_refuses_until_it_expires(
    catalog, client, make_license, make_key, frozen_clock
):
    """A worker killed between its hold and its charge leaves the hold: the wallet counts it
    until it expires (GATEWAY_BUDGET_RESERVATION_SECONDS), then the budget step releases it."""
    price_embeddings()
    license = make_license(name="dead", limit=LIMIT, period="daily")
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    wallet = Wallet.objects.get(license=license)
    Reservation.objects.create(
        wallet=wallet, request_id="dead-worker", amount=900, expires_at=hold_for("x", 0).expires_at
    )
    Wallet.objects.filter(pk=wallet.pk).update(reserved=900)
    refused = client.post("/v1/embeddings", headers=headers, json=EMBED)
    assert refused.status_code == 400 and refused.json()["error"]["message"] == OUT_OF_BUDGET
    frozen_clock.advance(901)
    assert client.post("/v1/embeddings", headers=headers, json=EMBED).status_code == 200
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 2 * COST} == {"license": ledger_sum(license=license)}


def test_the_sweep_releases_only_what_expired(make_license, frozen_clock):
    license = make_license(name="sweep", limit=LIMIT, period="daily")
    config = license_budget(license)
    state = budget_check(
        license_id=license.id, config=config, holder="license", hold=hold_for("old", 300)
    )
    frozen_clock.advance(600)
    budget_check(license_id=license.id, config=config, holder="license", hold=hold_for("new", 200))
    assert holds_left(license) == (500, 2)
    frozen_clock.advance(301)  # "old" expired, "new" not yet
    assert release_expired() == 1
    assert holds_left(license) == (200, 1)
    assert state.hold is not None


def test_the_spool_replay_releases_the_hold_once(make_license):
    license = make_license(name="spooled", limit=LIMIT, period="daily")
    state = budget_check(
        license_id=license.id,
        config=license_budget(license),
        holder="license",
        hold=hold_for("req-s", 300),
    )
    assert holds_left(license) == (300, 1)
    entry = entry_for(license, "req-s", credits=250)
    assert transaction_record_once(entry=entry, budget=state) is True
    assert transaction_record_once(entry=entry, budget=state) is False  # replayed twice
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 250}


def test_a_batch_releases_each_rows_hold_and_a_refusals(make_license):
    """One group-committed batch: a charged row releases its hold and is charged its actual
    cost; a refusal's row (no wallet) releases its hold too."""
    license = make_license(name="batch", limit=LIMIT, period="daily")
    config = license_budget(license)
    held = [
        budget_check(
            license_id=license.id, config=config, holder="license", hold=hold_for(f"r{n}", 100)
        )
        for n in range(3)
    ]
    assert holds_left(license) == (300, 3)

    async def record():
        try:
            await asyncio.gather(
                transaction_record(entry=entry_for(license, "r0", credits=80), budget=held[0]),
                transaction_record(entry=entry_for(license, "r1", credits=130), budget=held[1]),
                transaction_record(entry=entry_for(license, "r2", credits=0), budget=None),
            )
        finally:
            await pgpool.close_all()

    asyncio.run(record())
    assert holds_left(license) == (0, 0)
    assert spent_of(license) == {"license": 210}


def test_a_full_wallet_takes_no_hold(make_license):
    license = make_license(name="full", limit=LIMIT, period="daily")
    config = license_budget(license)
    budget_check(license_id=license.id, config=config, holder="license", hold=hold_for("a", 999))
    budget_check(license_id=license.id, config=config, holder="license", hold=hold_for("b", 999))
    with pytest.raises(Exception, match=OUT_OF_BUDGET):
        budget_check(license_id=license.id, config=config, holder="license", hold=hold_for("c", 1))
    assert holds_left(license) == (1998, 2)  # 1 was left after "a": "b" fits, "c" does not
    key = wallet_key(license_id=license.id, config=config, holder="license")
    assert Wallet.objects.get(license=license).window_start == key.window_start


# --- what each request reserves (no database) -----------------------------------------------


def test_known_costs_reserve_their_catalog_price():
    per_call = {"type": "per_call", "call": 5000}
    per_page = {"type": "per_page", "page": 300}
    sized = {"type": "per_image_by_size", "sizes": {"1024x1024": 40_000, "1792x1024": 80_000}}
    search = WebSearch().reserve_usage(WebSearchRequest(query="x"), {})
    fetch = Fetch().reserve_usage(FetchRequest(urls=["https://a.example", "https://b.example"]), {})
    images = ImageGeneration().reserve_usage(
        ImageGenerationRequest(model="m", prompt="p", n=3, size="1792x1024"), {}
    )
    assert credits_for(per_call, search) == 5000
    assert credits_for(per_page, fetch) == 600  # every page asked for
    assert credits_for(sized, images) == 240_000


@pytest.fixture
def frozen_clock():
    """The gateway's clock, standing still until the test moves it (a gateway served in a
    thread of this process sees it)."""
    with clock.frozen() as frozen:
        yield frozen


def test_the_command_releases_expired_holds(make_license, frozen_clock):
    from django.core.management import call_command

    license = make_license(name="command", limit=LIMIT, period="daily")
    config = license_budget(license)
    budget_check(license_id=license.id, config=config, holder="license", hold=hold_for("a", 400))
    out = io.StringIO()
    call_command("release_reservations", stdout=out)
    assert out.getvalue().strip() == "0 expired budget reservations released"
    frozen_clock.advance(901)
    call_command("release_reservations", stdout=out)
    assert out.getvalue().splitlines()[-1] == "1 expired budget reservations released"
    assert holds_left(license) == (0, 0)


def test_an_absurd_price_holds_no_more_than_the_cap(make_license):
    from licensing.ledger.reservations import HOLD_CAP

    license = make_license(name="absurd", limit=LIMIT, period="daily")
    hold = hold_for("huge", 2**64)
    assert hold.amount == HOLD_CAP
    budget_check(license_id=license.id, config=license_budget(license), holder="license", hold=hold)
    assert holds_left(license) == (HOLD_CAP, 1)


def test_a_bulk_embeddings_input_is_held_roughly():
    """Past 16 KB of text the hold counts characters / 4, not the BPE encoding's CPU."""
    from inference.endpoints.embeddings import Embeddings
    from inference.schemas.embeddings import EmbeddingsRequest

    small = EmbeddingsRequest(model="text-embedding-3-large", input=[" ".join(["word"] * 100)])
    bulk = EmbeddingsRequest(model="text-embedding-3-large", input=["word " * 4000] * 2)
    assert Embeddings().reserve_usage(small, {}).prompt_tokens == 100  # BPE: " word" each
    assert Embeddings().reserve_usage(bulk, {}).prompt_tokens == 2 * 5000  # 20,000 chars / 4


def counting_statements(holds, sent: list | None = None, noted=lambda sql, params: len(params)):
    """Run `holds()` (a coroutine's maker) on a new loop; (its result, what `noted` says of
    each statement the async pool sent meanwhile: its parameter count), in `sent` if given."""
    sent = [] if sent is None else sent

    async def run():
        real = pgpool.fetch

        async def counted(sql, params):
            sent.append(noted(sql, params))
            return await real(sql, params)

        pgpool.fetch = counted
        try:
            return await holds()
        finally:
            pgpool.fetch = real
            await pgpool.close_all()

    return asyncio.run(run()), sent


def test_holds_arriving_together_share_one_statement_and_fit_in_order(make_license):
    """15 holds of 100 on one wallet and 3 on another, arriving together (PostgreSQL's pool):
    each wallet's holds share one statement, the first 10 of the first wallet fit, in the order
    they came, and all 3 of the second."""
    if not pgpool.available():
        pytest.skip("the batch is the async pool's (PostgreSQL)")
    from licensing.ledger.reservations import hold_batches

    first = make_license(name="first", limit=LIMIT, period="daily")
    second = make_license(name="second", limit=LIMIT, period="daily")
    wallets = [
        budget_check(license_id=lic.id, config=license_budget(lic), holder="license").wallet_id
        for lic in (first, second)
    ]
    results, sent = counting_statements(  # hold_batches(): the loop's own, made inside it
        lambda: asyncio.gather(
            *(hold_batches().submit(wallets[0], LIMIT, hold_for(f"a{n}", COST)) for n in range(15)),
            *(hold_batches().submit(wallets[1], LIMIT, hold_for(f"b{n}", COST)) for n in range(3)),
        )
    )
    assert [fits for fits, _ in results] == [True] * 10 + [False] * 5 + [True] * 3
    assert [before[1] for _, before in results[:11]] == [n * COST for n in range(11)]
    assert sent == [1, 1]  # one statement a wallet (its one parameter: its batch as JSON)
    assert holds_left(first) == (LIMIT, 10) and holds_left(second) == (3 * COST, 3)


def test_a_hold_with_none_in_flight_goes_alone_and_those_meanwhile_together(make_license):
    """`HoldBatches.take`: 15 holds of 100 arriving together on one wallet. The first, with no
    statement of its wallet in flight, sends its own from its task; the 14 that arrive while it
    is in flight go in one batch after it. 10 fit, in the order they came."""
    if not pgpool.available():
        pytest.skip("the batch is the async pool's (PostgreSQL)")
    from licensing.ledger.reservations import hold_batches

    lic = make_license(name="taken", limit=LIMIT, period="daily")
    wallet = budget_check(license_id=lic.id, config=license_budget(lic), holder="license").wallet_id
    results, sent = counting_statements(
        lambda: asyncio.gather(
            *(hold_batches().take(wallet, LIMIT, hold_for(f"t{n}", COST)) for n in range(15))
        )
    )
    assert [fits for fits, _ in results] == [True] * 10 + [False] * 5
    assert [before[1] for _, before in results[:11]] == [n * COST for n in range(11)]
    assert len(sent) == 2 and sent[1] == 1  # the first's own statement, then one batch (JSON)
    assert holds_left(lic) == (LIMIT, 10)


def test_a_request_cancelled_after_its_hold_committed_releases_it(make_license, monkeypatch):
    """The cancellation can reach the request after its statement has committed (psycopg was
    done with it, the pool's connection was on its way back): what it held is released then."""
    if not pgpool.available():
        pytest.skip("a hold sent from the request's task is the async pool's (PostgreSQL)")
    from licensing.ledger import reservations

    lic = make_license(name="cancelled late", limit=LIMIT, period="daily")
    wallet = budget_check(license_id=lic.id, config=license_budget(lic), holder="license").wallet_id
    real = reservations.reserve_async
    taken: list[bool] = []

    async def committed_then_cancelled(wallets, hold):
        fits, _ = await real(wallets, hold)
        taken.append(fits)
        raise asyncio.CancelledError

    monkeypatch.setattr(reservations, "reserve_async", committed_then_cancelled)

    async def take():
        try:
            with pytest.raises(asyncio.CancelledError):
                await reservations.hold_batches().take(wallet, LIMIT, hold_for("late", COST))
            assert len(reservations.releasing) == 1
            await asyncio.gather(*reservations.releasing)
        finally:
            await pgpool.close_all()

    asyncio.run(take())
    assert taken == [True]  # the hold was in before the cancellation came
    assert holds_left(lic) == (0, 0)

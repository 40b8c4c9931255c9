"""Failover under load (issue 24's "done means"): `direct` has two connections of equal weight,
`default` dead and `b` alive, and concurrent clients send chat completions, embeddings and chat
streams. No client sees a failure, the dead connection is called only until its circuit opens
(a bound, derived below), every request is one ledger row served by `b`, and what the rows
charge is what the answers were worth, is what the wallet spent.

The bound on the calls to the dead connection is N + C: N = `GATEWAY_CIRCUIT_FAILURES` (1 for
a 429 with Retry-After, which opens the circuit at once), C = the requests in flight at most
(the clients' threads; with W workers each worker has C / W threads of its own). Why: each call
to the dead connection fails and is counted once (a request tries a connection at most once).
Let T be when the N-th failure is counted; the circuit is open from then on (the cool-down is
600 s: no half-open probe during the test, and it is still open at the end). A call counted
after T was, on its worker, under way at T or admitted after T while that worker's copy of the
circuit still said closed. The copy says open from the worker's first failure counted after T
(the count answers with the open circuit) or its next read from Redis (at most
`catalog.circuit.REFRESH` = 1 s later), whichever comes first, and stays open (an answer from
Redis that comes back out of order does not close it again); so all of a worker's calls
counted after T are under way together at that moment: at most its C / W requests, C on the
W workers together. In one process without Redis the count and the copy are one dict, so only
the calls under way at T follow: at most C - 1. The breaker-less figure would be half the
requests (equal weights).

The failure kinds are the issue's: connection refused (a closed port), 503 on every call, 429
with Retry-After, a time-out before the first byte (the fake hangs, the connection's time-out
is short), and a stream reset before its first byte (that case sends streams only: the same
connection answers a plain request, and a success closes a circuit)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
from django.db import connection
from django.db.models import Sum

from catalog.circuit import OPEN, circuit_key, read_circuits
from catalog.models import Model
from core import clock
from core.localcache import clear_all
from fake_upstreams import OpenAIFake, serve
from inference.billing import Usage, credits_for
from licensing.models import Transaction, Wallet
from tests.kit import wait_until
from tests.ports import free_block
from tests.processes import redis_server_or_skip, running_workers

from ..conftest import UPSTREAM_KEY

MINI = "gpt-4o-mini"
SMALL = "text-embedding-3-small"
FAILURES = 5  # GATEWAY_CIRCUIT_FAILURES
COOLDOWN = 600  # GATEWAY_CIRCUIT_COOLDOWN, and the 429's Retry-After: no probe in the test
DEAD_TIMEOUT = 1.0  # the dead connection's time-out in the "timeout" case (seconds)
QUEUED = 10_000  # failures queued on the dead fake: more than the test can ask for
MIXED = ("chat", "embeddings", "stream")

# kind -> (the ledger's reason for the failed attempt, failures that open the circuit)
KINDS = {
    "refused": ("connection", FAILURES),
    "503": ("status_5xx", FAILURES),
    "429": ("status_4xx", 1),
    "timeout": ("timeout", FAILURES),
    "reset": ("connection", FAILURES),
}


@dataclass
class Scenario:
    kind: str
    dead: OpenAIFake | None  # None: nothing listens (connection refused)
    dead_key: str  # the circuits' keys of direct/default and direct/b
    live_key: str
    reason: str
    opening: int  # failures that open the dead connection's circuit

    @property
    def load(self) -> tuple[str, ...]:
        return ("stream",) if self.kind == "reset" else MIXED

    def bound(self, concurrency: int) -> int:
        return self.opening + concurrency


@contextmanager
def dead_upstream(kind: str) -> Iterator[tuple[str, OpenAIFake | None]]:
    """The dead connection's base URL, and its fake (None when nothing listens there)."""
    if kind == "refused":
        yield f"http://127.0.0.1:{free_block(1)}/v1", None
        return
    with serve(OpenAIFake(api_key=UPSTREAM_KEY)) as fake:
        if kind == "503":
            fake.fail_next(status=503, times=QUEUED)
        elif kind == "429":
            fake.fail_next(status=429, headers={"Retry-After": str(COOLDOWN)}, times=QUEUED)
        elif kind == "timeout":
            fake.hang_next(seconds=60, times=QUEUED)
        else:
            fake.stream_fail_after = 0  # every stream breaks before its first byte
        yield fake.base_url, fake


@pytest.fixture(params=list(KINDS))
def scenario(request, catalog) -> Iterator[Scenario]:
    """direct/default dead (as the `request.param` kind says), direct/b alive, equal weights."""
    from catalog.services import connection_configure

    kind = request.param
    with dead_upstream(kind) as (dead_url, dead):
        default = connection_configure(
            provider_slug="direct", base_url=dead_url, api_key=UPSTREAM_KEY
        )
        if kind == "timeout":
            default.timeout = DEAD_TIMEOUT
            default.save()
        b = connection_configure(
            provider_slug="direct", name="b", base_url=catalog["direct"].base_url,
            api_key=UPSTREAM_KEY,
        )  # fmt: skip
        clear_all()
        reason, opening = KINDS[kind]
        yield Scenario(
            kind=kind,
            dead=dead,
            dead_key=circuit_key("direct", "default", default.updated_at.timestamp()),
            live_key=circuit_key("direct", "b", b.updated_at.timestamp()),
            reason=reason,
            opening=opening,
        )


@pytest.fixture
def funded(make_license, make_key):
    license = make_license(name="failover-load", limit=10**12)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


# --- the load and what the answers were worth ----------------------------------------------


@dataclass
class Answer:
    what: str
    status: int
    request_id: str
    text: str  # the body


def request_of(what: str, n: int) -> tuple[str, dict]:
    if what == "embeddings":
        return "/v1/embeddings", {"model": SMALL, "input": f"text number {n} to embed"}
    body = {"model": MINI, "messages": [{"role": "user", "content": f"question number {n}"}]}
    if what == "stream":
        body.update(stream=True, stream_options={"include_usage": True})
    return "/v1/chat/completions", body


def fire(urls: list[str], headers: dict, load: tuple[str, ...], count: int, threads: int):
    """`count` requests (the kinds of `load` in turn) from `threads` threads; with several
    gateways at `urls`, each has threads of its own (`threads` / len(urls)): the requests in
    flight at one gateway are at most its threads, which the bound counts on."""
    clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
    pools = [ThreadPoolExecutor(threads // len(urls)) for _ in urls]

    def one(n: int) -> Answer:
        what = load[n % len(load)]
        path, body = request_of(what, n)
        response = clients[n % len(urls)].post(path, headers=headers, json=body)
        return Answer(what, response.status_code, response.headers.get("X-Request-Id", ""),
                      response.text)  # fmt: skip

    try:
        futures = [pools[n % len(urls)].submit(one, n) for n in range(count)]
        return [future.result() for future in futures]
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)
        for client in clients:
            client.close()


def worth(answer: Answer, cost: dict) -> int:
    """What an answer was worth: the credits an embeddings answer reports; a chat answer's
    usage at the model's price (`cost`)."""
    if answer.what == "embeddings":
        return json.loads(answer.text)["usage"]["credits_used"]
    if answer.what == "chat":
        usage = json.loads(answer.text)["usage"]
    else:  # a stream: it ended as it should, its last chunk before [DONE] carries the usage
        assert answer.text.endswith("data: [DONE]\n\n"), answer.text[-300:]
        chunks = [
            json.loads(event[len("data: ") :])
            for event in answer.text.split("\n\n")
            if event.startswith("data: {")
        ]
        assert all("error" not in chunk for chunk in chunks), answer.text[-300:]
        usage = chunks[-1]["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return credits_for(
        cost,
        Usage(
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
            cached_tokens=details.get("cached_tokens"),
        ),
    )


# --- the checks -------------------------------------------------------------------------------


def check(scenario: Scenario, license, answers: list[Answer], concurrency: int) -> int:
    """Everything the issue asks of the run; the calls the dead connection received."""
    failed = [(a.what, a.status, a.text[:300]) for a in answers if a.status != 200]
    assert not failed, failed[:5]

    rows = Transaction.objects.filter(license=license)
    wait_until(
        lambda: rows.count() >= len(answers),
        timeout=30,
        what=lambda: f"{rows.count()} ledger rows for {len(answers)} answers",
    )
    assert rows.count() == len(answers)
    ids = [a.request_id for a in answers]
    assert len(set(ids)) == len(ids)
    by_id = {row.request_id: row for row in rows}
    assert set(by_id) == set(ids)
    cost = Model.objects.get(model_id=MINI).cost
    credits = {a.request_id: worth(a, cost) for a in answers}

    # Every row a success served by the live connection, charged what its answer was worth.
    for answer in answers:
        row = by_id[answer.request_id]
        assert (row.status_code, row.provider, row.connection) == (200, "direct", "b"), row
        assert row.credits == credits[answer.request_id] > 0, (answer.what, row.credits)
    charged = rows.aggregate(total=Sum("credits"))["total"]
    spent = Wallet.objects.filter(license=license).aggregate(total=Sum("spent"))["total"]
    assert charged == spent == sum(credits.values())

    # A row that failed over names the dead connection and why; the others made one call.
    over = rows.filter(attempts=2)
    assert set(over.values_list("failovers", flat=True)) <= {f"direct/default: {scenario.reason}"}
    assert set(rows.exclude(attempts=2).values_list("attempts", "failovers")) == {(1, "")}

    # Each call to the dead connection is one request that failed over (where a fake can count
    # them), and they stop at the bound: the circuit opened, and is open still.
    calls = over.count()
    if scenario.dead is not None:
        assert len(scenario.dead.requests) == calls
    bound = scenario.bound(concurrency)
    assert bound * 4 <= len(answers)  # far below the requests
    assert scenario.opening <= calls <= bound, (calls, bound)
    circuits = read_circuits([scenario.dead_key, scenario.live_key])
    assert circuits[scenario.dead_key].state(clock.now()) == OPEN
    assert scenario.live_key not in circuits  # never failed
    print(f"{scenario.kind}: {calls} calls to the dead connection, bound {bound}")
    return calls


def breaker_settings(settings) -> None:
    settings.GATEWAY = {
        **settings.GATEWAY,
        "CIRCUIT_FAILURES": FAILURES,
        "CIRCUIT_COOLDOWN": COOLDOWN,
    }


# --- one process, per-process circuits --------------------------------------------------------


def test_failover_under_load_in_one_process(gateway, scenario, funded, settings):
    """The live gateway of the test process (per-process circuits): 100 requests from 10
    threads."""
    breaker_settings(settings)
    license, headers = funded
    answers = fire([gateway.url], headers, scenario.load, count=100, threads=10)
    check(scenario, license, answers, concurrency=10)


# --- two worker processes sharing circuits through Redis ----------------------------------


@pytest.mark.slow  # Gateway worker processes and a Redis of their own
def test_failover_under_load_across_workers(scenario, funded, tmp_path, settings):
    """Two gateway worker processes on PostgreSQL sharing their circuits through Redis: 300
    requests from 20 threads."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes the workers' ledger writers")
    license, headers = funded
    server = redis_server_or_skip(tmp_path)
    env = {
        "REDIS_URL": server.url,
        "GATEWAY_CIRCUIT_FAILURES": str(FAILURES),
        "GATEWAY_CIRCUIT_COOLDOWN": str(COOLDOWN),
    }
    try:
        with running_workers(2, tmp_path, env) as workers:
            started = time.monotonic()
            answers = fire([w.url for w in workers], headers, scenario.load, 300, threads=20)
            print(f"300 requests in {time.monotonic() - started:.1f} s")
            settings.REDIS_URL = server.url  # read_circuits: the workers' shared state
            check(scenario, license, answers, concurrency=20)  # the workers write the rows
    finally:
        server.stop()

"""Failover, pins, weights, circuit breaking and data residency, end to end through the live
gateway (issue 24; docs/routing.md). `direct` has two connections, each its own fake OpenAI
server (`default`: the session's, `b`: a second one; `c`, a third, where a test needs it);
`aggregator` is the OpenRouter fake. Each test asserts the client's answer, which fake got how
many calls, the ledger row (provider, connection, attempts, failovers, credits, status, error
code) and the wallet where one is charged.

Order of the attempts: smooth weighted round-robin picks the first connection (its first pick
is the heaviest, so a test that needs `default` first gives it weight 2 against `b`'s 1), then
the provider's other connections, then the model's other provider rows. The round-robin's
scores and the circuits are per process: reset around every test. No test waits for the wall
clock: cool-downs run on the frozen `core.clock`; the one time-out is 0.5 s.

The circuit's state machine on its own, both backends: tests/providers/test_circuit.py. The
command, the admin form and the policy's `routing` key: tests/providers/test_connection_settings.py.
"""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from core import clock
from tests.conftest import UPSTREAM_KEY
from tests.kit import error, wait_for_ledger, wait_until
from tests.ports import free_block

pytestmark = pytest.mark.django_db(transaction=True)

MINI = "gpt-4o-mini"  # rows: direct (owner), aggregator
EMBEDDING = "text-embedding-3-small"  # rows: direct, aggregator (by header only)
UNAVAILABLE = "Service temporarily unavailable"
BAD_REQUEST = {"error": {"message": "Bad thing happened.", "type": "invalid_request_error"}}


@pytest.fixture(scope="module")
def spare_fakes():
    """Two more OpenAI fakes: direct/b's, and direct/c's where a test adds it."""
    from fake_upstreams import OpenAIFake, serve

    with (
        serve(OpenAIFake(api_key=UPSTREAM_KEY)) as b,
        serve(OpenAIFake(api_key=UPSTREAM_KEY)) as c,
    ):
        yield b, c


@pytest.fixture(autouse=True)
def fresh_routing():
    """Circuits and the weighted round-robin's scores are per process: each test starts closed
    and at the round-robin's first pick."""
    from catalog import routing
    from catalog.circuit import circuits_reset

    circuits_reset()
    routing._scores.clear()
    yield
    circuits_reset()
    routing._scores.clear()


@pytest.fixture
def fakes(catalog, spare_fakes):
    """direct/default and direct/b (weight 1 each) on their own fakes; aggregator as ever."""
    b, c = spare_fakes
    for fake in (b, c):
        fake.reset()
    connect("b", b)
    return {"default": catalog["direct"], "b": b, "c": c, "aggregator": catalog["aggregator"]}


@pytest.fixture
def license(make_license):
    """The test's license has a budget, so that a wallet records what was charged."""
    return make_license(limit=10**9)


@pytest.fixture
def frozen_clock():
    with clock.frozen() as frozen:
        yield frozen


def tune(settings, **values):
    """settings.GATEWAY with `values` (FAILOVER_ATTEMPTS, CIRCUIT_FAILURES, ...) for the test."""
    settings.GATEWAY = {**settings.GATEWAY, **values}


def connect(name, where, **fields):
    """direct's connection `name` to a fake (or a URL); saving it clears the catalog cache."""
    from catalog.services import connection_configure

    url = where if isinstance(where, str) else where.base_url
    return connection_configure(
        provider_slug="direct", name=name, base_url=url, api_key=UPSTREAM_KEY, **fields
    )


def chat(client, auth, *, stream=False, pin=None, model=MINI):
    body = {"model": model, "messages": [{"role": "user", "content": "Hello there"}]}
    if stream:
        body["stream"] = True
    headers = {**auth, **({"X-Service-Provider": pin} if pin else {})}
    return client.post("/v1/chat/completions", json=body, headers=headers)


def embed(client, auth, *, pin=None):
    headers = {**auth, **({"X-Service-Provider": pin} if pin else {})}
    body = {"model": EMBEDDING, "input": "residency"}
    return client.post("/v1/embeddings", json=body, headers=headers)


def calls(fakes, *names) -> tuple[int, ...]:
    """How many requests each named fake received."""
    return tuple(len(fakes[name].requests) for name in names)


def rows():
    from licensing.models import Transaction

    return list(Transaction.objects.order_by("id"))


def row_of(row) -> tuple:
    return (
        row.provider,
        row.connection,
        row.attempts,
        row.failovers,
        row.status_code,
        row.error_code,
    )


def circuit_of(connection) -> str:
    from catalog.circuit import circuit_key

    return circuit_key("direct", connection.name, connection.updated_at.timestamp())


def last_row():
    return rows()[-1]


def spent(license) -> int:
    from licensing.models import Wallet

    return sum(Wallet.objects.filter(license=license).values_list("spent", flat=True))


def sse(text: str) -> list[str]:
    return [event for event in text.split("\n\n") if event.strip()]


def answered(response, stream: bool) -> None:
    assert response.status_code == 200, response.text
    if stream:
        events = sse(response.text)
        assert events[-1] == "data: [DONE]" and '"error"' not in response.text, events
    else:
        assert response.json()["choices"][0]["message"]["content"]


# --- 1. a failed connection fails over to the provider's other one ------------------------------


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ("503", "status_5xx"),
        ("401", "status_4xx"),  # the provider refuses our key: the spec's 503, retryable
        ("refused", "connection"),
        ("reset", "connection"),  # headers, then the socket closed mid-body
        ("429", "status_4xx"),
        ("timeout", "timeout"),
        ("stream reset", "connection"),
        ("stream silent", "timeout"),  # headers, then nothing past the time-out
    ],
)
def test_a_failed_attempt_fails_over_to_the_other_connection(
    client, auth, fakes, license, failure, reason
):
    from catalog.models import Connection

    default = fakes["default"]
    url = f"http://127.0.0.1:{free_block(1)}/v1" if failure == "refused" else default
    connect("default", url, weight=2)  # the round-robin's first pick
    if failure in ("timeout", "stream silent"):
        connection = Connection.objects.get(provider__slug="direct", name="default")
        connection.timeout = 0.5
        connection.save()
    if failure in ("503", "401"):
        default.fail_next(int(failure))
    elif failure == "reset":
        default.drop_next()
    elif failure == "429":
        default.fail_next(429, headers={"Retry-After": "30"})
    elif failure == "timeout":
        default.hang_next(5)
    elif failure == "stream reset":
        default.stream_fail_after = 0  # headers sent, then the socket closed
    elif failure == "stream silent":
        default.stream_stall_after, default.stream_stall_seconds = 0, 5
    stream = failure.startswith("stream")

    answered(chat(client, auth, stream=stream), stream)
    wait_for_ledger(1)
    row = last_row()
    assert calls(fakes, "default", "b", "aggregator") == (0 if failure == "refused" else 1, 1, 0)
    assert row_of(row) == ("direct", "b", 2, f"direct/default: {reason}", 200, "")
    assert row.credits > 0 and row.total_tokens > 0
    # Charged once, the answer's price: the same request answered by b alone costs the same.
    answered(chat(client, auth, stream=stream, pin="direct/b"), stream)
    wait_for_ledger(2)
    reference = last_row()
    assert (reference.attempts, reference.failovers, reference.credits) == (1, "", row.credits)
    assert spent(license) == 2 * row.credits


def test_a_responses_stream_failing_before_its_first_event_fails_over(client, auth, fakes, license):
    connect("default", fakes["default"], weight=2)
    fakes["default"].stream_fail_after = 0
    body = {"model": MINI, "input": "hi", "stream": True}
    response = client.post("/v1/responses", json=body, headers=auth)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    assert events[0].startswith("event: response.created")
    assert events[-1].startswith("event: response.completed")
    assert not [event for event in events if event.startswith("event: error")]
    wait_for_ledger(1)
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 0)
    row = last_row()
    assert row_of(row) == ("direct", "b", 2, "direct/default: connection", 200, "")
    assert row.credits > 0 and spent(license) == row.credits


def test_many_clients_with_one_connection_dead(gateway, auth, fakes, license, settings):
    """Under concurrent load: no client sees the dead connection, which is called at most until
    its circuit opens (CIRCUIT_FAILURES, plus the requests already on their way to it)."""
    tune(settings, CIRCUIT_FAILURES=3)
    fakes["default"].fail_next(503, times=1000)
    clients, requests = 8, 80

    def request(_):
        return httpx.post(
            gateway.url + "/v1/embeddings",
            json={"model": EMBEDDING, "input": "load"},
            headers=auth,
            timeout=30,
        ).status_code

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        statuses = list(pool.map(request, range(requests)))
    assert statuses == [200] * requests
    dead, alive = calls(fakes, "default", "b")
    assert 3 <= dead <= 3 + clients - 1
    assert alive == requests
    ledger = rows()
    assert len(ledger) == requests
    assert sum(row.attempts == 2 for row in ledger) == dead
    assert {row.connection for row in ledger} == {"b"}
    assert spent(license) == sum(row.credits for row in ledger) > 0


# --- 2. never retried -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "status", "code"),
    [
        (400, 400, "provider_rejected"),
        (404, 404, "provider_not_found"),
        (422, 400, "provider_rejected"),
    ],
)
def test_an_answer_about_the_request_is_never_retried(
    client, auth, fakes, license, upstream, status, code
):
    from catalog.circuit import read_circuits

    connection = connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(upstream, body=BAD_REQUEST)
    assert error(chat(client, auth), status) == "Bad thing happened."
    assert calls(fakes, "default", "b", "aggregator") == (1, 0, 0)
    row = last_row()
    assert row_of(row) == ("direct", "default", 1, "", status, code)
    assert (row.credits, spent(license)) == (0, 0)
    # The connection answered: it is alive, its circuit counts no failure.
    assert read_circuits([circuit_of(connection)]) == {}


def test_a_failover_ending_in_an_answer_about_the_request_is_that_answer(
    client, auth, fakes, license
):
    connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(503)
    fakes["b"].fail_next(400, body=BAD_REQUEST)
    assert error(chat(client, auth), 400) == "Bad thing happened."
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 0)  # not on to the aggregator
    row = last_row()
    assert row_of(row) == (
        "direct",
        "b",
        2,
        "direct/default: status_5xx",
        400,
        "provider_rejected",
    )
    assert (row.credits, spent(license)) == (0, 0)


def test_a_stream_broken_after_its_first_byte_is_an_in_stream_error(client, auth, fakes, license):
    connect("default", fakes["default"], weight=2)
    fakes["default"].stream_fail_after = 1  # one event reaches the client, then the socket drops
    response = chat(client, auth, stream=True)
    assert response.status_code == 200
    events = sse(response.text)
    assert events[-2:] == [
        'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}',
        "data: [DONE]",
    ]
    assert len(events) == 3  # the one relayed chunk, the error, [DONE]
    wait_for_ledger(1)
    assert calls(fakes, "default", "b", "aggregator") == (1, 0, 0)
    row = last_row()
    assert row_of(row) == ("direct", "default", 1, "", 503, "stream_failed")
    assert (row.credits, spent(license)) == (0, 0)


# --- 3. the bound on attempts, and the model's next provider row -------------------------------


def test_attempts_are_bounded(client, auth, fakes, license, settings):
    tune(settings, FAILOVER_ATTEMPTS=2)
    connect("default", fakes["default"], weight=2)
    for name in ("default", "b", "aggregator"):
        fakes[name].fail_next(503)
    assert error(chat(client, auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 0)
    row = last_row()
    assert row_of(row) == (
        "direct",
        "b",
        2,
        "direct/default: status_5xx; direct/b: status_5xx",
        503,
        "provider_unavailable",
    )
    assert (row.credits, spent(license)) == (0, 0)


def test_no_attempt_starts_after_the_time_budget(client, auth, fakes, license, settings):
    tune(settings, FAILOVER_BUDGET=0)  # spent by the first attempt
    connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(503)
    assert error(chat(client, auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (1, 0, 0)
    assert row_of(last_row()) == (
        "direct",
        "default",
        1,
        "direct/default: status_5xx",
        503,
        "provider_unavailable",
    )


def test_a_chat_model_fails_over_to_its_next_provider_row(client, auth, fakes, license):
    connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(503)
    fakes["b"].fail_next(502)
    answered(chat(client, auth), stream=False)
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 1)
    assert fakes["aggregator"].last.json["model"] == "openai/gpt-4o-mini"  # that row's model id
    row = last_row()
    assert row_of(row) == (
        "aggregator",
        "default",
        3,
        "direct/default: status_5xx; direct/b: status_5xx",
        200,
        "",
    )
    assert row.credits > 0 and spent(license) == row.credits


def test_embeddings_never_fail_over_to_the_aggregator(client, auth, fakes, license):
    """The spec's "aggregator: opt-in by header only" for embeddings holds under failover."""
    for name in ("default", "b"):
        fakes[name].fail_next(503)
    assert error(embed(client, auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 0)
    row = last_row()
    assert (row.provider, row.attempts, row.status_code, row.error_code) == (
        "direct",
        2,
        503,
        "provider_unavailable",
    )
    assert (row.credits, spent(license)) == (0, 0)
    # Pinned, the aggregator's row serves them.
    assert embed(client, auth, pin="aggregator").status_code == 200
    assert calls(fakes, "aggregator") == (1,)
    assert row_of(last_row()) == ("aggregator", "default", 1, "", 200, "")


# --- 4. pins narrow -----------------------------------------------------------------------------


def test_a_pinned_connection_never_fails_over(client, auth, fakes, license, settings):
    tune(settings, CIRCUIT_FAILURES=1)
    fakes["b"].fail_next(503)
    assert error(chat(client, auth, pin="direct/b"), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (0, 1, 0)
    assert row_of(last_row()) == (
        "direct",
        "b",
        1,
        "direct/b: status_5xx",
        503,
        "provider_unavailable",
    )
    # Its circuit is open now: the pinned request is refused at once, still not failed over.
    assert error(chat(client, auth, pin="direct/b"), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (0, 1, 0)
    assert row_of(last_row()) == ("direct", "b", 0, "", 503, "provider_unavailable")
    assert spent(license) == 0


def test_a_provider_pin_fails_over_only_among_its_connections(client, auth, fakes, license):
    connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(503)
    answered(chat(client, auth, pin="direct"), stream=False)
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 0)
    assert row_of(last_row()) == ("direct", "b", 2, "direct/default: status_5xx", 200, "")

    for name in ("default", "b"):
        fakes[name].fail_next(503)
    assert error(chat(client, auth, pin="direct"), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (2, 2, 0)  # never the aggregator
    assert last_row().attempts == 2


# --- 5. weights -------------------------------------------------------------------------------


def test_weights_1_to_3_split_traffic_exactly(client, auth, fakes):
    """Smooth weighted round-robin is exact over every cycle of sum(weights) = 4 picks: the
    tolerance asserted is none, 100/300 of 400 and one `default` in each cycle of four."""
    connect("default", fakes["default"], weight=1)
    connect("b", fakes["b"], weight=3)
    for _ in range(400):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (100, 300)
    served = [row.connection for row in rows()]
    cycles = [sorted(served[i : i + 4]) for i in range(0, 400, 4)]
    assert cycles == [["b", "b", "b", "default"]] * 100
    assert {row.attempts for row in rows()} == {1}


def test_a_standby_connection_serves_only_when_the_others_fail(client, auth, fakes, settings):
    tune(settings, CIRCUIT_FAILURES=2)
    connect("b", fakes["b"], weight=0)
    for _ in range(10):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (10, 0)

    fakes["default"].fail_next(503, times=100)
    for _ in range(4):
        assert embed(client, auth).status_code == 200
    # Two failovers open default's circuit; then the standby serves on its own.
    assert calls(fakes, "default", "b") == (12, 4)
    assert [row_of(row)[:4] for row in rows()[10:]] == [
        ("direct", "b", 2, "direct/default: status_5xx"),
        ("direct", "b", 2, "direct/default: status_5xx"),
        ("direct", "b", 1, ""),
        ("direct", "b", 1, ""),
    ]


def test_a_standby_connection_serves_its_pin(client, auth, fakes):
    connect("b", fakes["b"], weight=0)
    assert embed(client, auth, pin="direct/b").status_code == 200
    assert calls(fakes, "default", "b") == (0, 1)
    assert row_of(last_row()) == ("direct", "b", 1, "", 200, "")


def test_a_connection_without_credentials_is_never_tried(client, auth, fakes):
    from catalog.services import connection_configure

    # The heaviest, but without a key: neither picked nor a failover.
    connection_configure(provider_slug="direct", name="c", base_url=fakes["c"].base_url, weight=5)
    for _ in range(4):
        answered(chat(client, auth), stream=False)
    assert calls(fakes, "default", "b", "c") == (2, 2, 0)
    fakes["default"].fail_next(503)
    fakes["b"].fail_next(503)
    answered(chat(client, auth), stream=False)
    assert calls(fakes, "default", "b", "c", "aggregator") == (3, 3, 0, 1)
    assert last_row().attempts == 3


# --- 6. circuit breaking -----------------------------------------------------------------------


def test_the_circuit_opens_and_a_failed_probe_reopens_it(
    client, auth, fakes, settings, frozen_clock
):
    tune(settings, CIRCUIT_FAILURES=3, CIRCUIT_COOLDOWN=30)
    fakes["default"].fail_next(503, times=100)
    for _ in range(12):
        assert embed(client, auth).status_code == 200
    # Three consecutive failures opened it: the dead connection's calls stop growing.
    assert calls(fakes, "default", "b") == (3, 12)
    assert sum(row.attempts == 2 for row in rows()) == 3

    frozen_clock.advance(29)  # still cooling down
    for _ in range(4):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default") == (3,)

    frozen_clock.advance(2)  # past the cool-down: one probe, which fails and reopens it
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default") == (4,)
    probe = [row for row in rows()[16:] if row.attempts == 2]
    assert [row_of(row) for row in probe] == [
        ("direct", "b", 2, "direct/default: status_5xx", 200, "")
    ]

    frozen_clock.advance(31)  # and again: exactly one more probe
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (5, 28)
    assert len(rows()) == 28


def test_one_probe_at_a_time_and_its_success_closes_the_circuit(
    gateway, client, auth, fakes, settings, frozen_clock
):
    tune(settings, CIRCUIT_FAILURES=2, CIRCUIT_COOLDOWN=30)
    fakes["default"].fail_next(503, times=2)
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (2, 6)

    frozen_clock.advance(31)
    fakes["default"].hold_next()  # the probe waits in the fake until released

    def request(_):
        return httpx.post(
            gateway.url + "/v1/embeddings",
            json={"model": EMBEDDING, "input": "probe"},
            headers=auth,
            timeout=30,
        ).status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(request, n) for n in range(6)]

        # Half of them pick default first; one is its probe, the others pass it by for b.
        def done() -> int:
            return sum(future.done() for future in futures)

        wait_until(
            lambda: fakes["default"].holding == 1 and done() == 5,
            what=lambda: f"default holds {fakes['default'].holding}, {done()} answered",
        )
        assert calls(fakes, "default", "b") == (3, 11)
        fakes["default"].release()
        assert [f.result() for f in futures] == [200] * 6
    assert calls(fakes, "default", "b") == (3, 11)
    assert [row.connection for row in rows()[6:]].count("default") == 1

    # Closed: default takes its share again.
    for _ in range(4):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (5, 13)


def test_a_429_retry_after_skips_the_connection_that_long(
    client, auth, fakes, settings, frozen_clock
):
    from catalog.circuit import read_circuits

    tune(settings, CIRCUIT_FAILURES=5, CIRCUIT_COOLDOWN=30)
    connection = connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(429, headers={"Retry-After": "120"})
    assert embed(client, auth).status_code == 200
    assert row_of(last_row())[:4] == ("direct", "b", 2, "direct/default: status_4xx")
    key = circuit_of(connection)
    circuit = read_circuits([key])[key]
    assert (circuit.open_until, circuit.last_error) == (frozen_clock.at + 120, "status_4xx")

    frozen_clock.advance(119)  # well past the 30 s cool-down, not past the Retry-After
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (1, 7)

    frozen_clock.advance(2)
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (5, 9)  # back at its weight of 2 to 1
    circuit = read_circuits([key])[key]
    assert (circuit.state(frozen_clock.at), circuit.failures) == ("closed", 0)


@pytest.mark.parametrize(
    ("retry_after", "open_for"),
    [
        ("1e400", 3600.0),  # bounded (RETRY_AFTER_MAX)
        ("-5", None),
        ("nan", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),  # an HTTP date already past
        ("Fri, 31 Dec 9999 23:59:59 GMT", 3600.0),
        ("Wed, 21 Oct 2015 99999999999:28:00 GMT", None),  # a date whose fields overflow
        ("soon, please", None),
    ],
)
def test_a_hostile_retry_after_is_no_500(client, auth, fakes, frozen_clock, retry_after, open_for):
    """An unreadable Retry-After is a failure like any other (counted, not opening the circuit
    on its own); a huge one parks the connection for at most an hour."""
    from catalog.circuit import read_circuits

    connection = connect("default", fakes["default"], weight=2)
    fakes["default"].fail_next(429, headers={"Retry-After": retry_after})
    answered(chat(client, auth), stream=False)
    assert calls(fakes, "default", "b") == (1, 1)
    assert row_of(last_row()) == ("direct", "b", 2, "direct/default: status_4xx", 200, "")
    circuit = read_circuits([circuit_of(connection)])[circuit_of(connection)]
    if open_for is None:
        assert (circuit.failures, circuit.state(frozen_clock.at)) == (1, "closed")
    else:
        assert circuit.open_until == frozen_clock.at + open_for


def test_every_circuit_open_fails_fast_without_a_call(client, auth, fakes, license, settings):
    tune(settings, CIRCUIT_FAILURES=1)
    connect("default", fakes["default"], weight=2)
    for name in ("default", "b", "aggregator"):
        fakes[name].fail_next(503)
    assert error(chat(client, auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 1)
    assert last_row().attempts == 3

    assert error(chat(client, auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "aggregator") == (1, 1, 1)
    row = last_row()
    assert row_of(row) == ("direct", "default", 0, "", 503, "provider_unavailable")
    assert (row.credits, spent(license)) == (0, 0)


def test_saving_a_connection_closes_its_circuit(client, auth, fakes, settings):
    tune(settings, CIRCUIT_FAILURES=1)
    fakes["default"].fail_next(503)
    for _ in range(4):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (1, 4)

    connect("default", fakes["default"], weight=2)  # a new weight: a fresh, closed circuit
    for _ in range(3):
        assert embed(client, auth).status_code == 200
    assert calls(fakes, "default", "b") == (3, 5)


# --- 7. data residency -------------------------------------------------------------------------


@pytest.fixture
def eu_auth(make_license, make_key):
    from licensing.rules.policy import open_policy_document

    policy = {**open_policy_document(), "routing": {"connection_tags": ["eu"]}}
    license = make_license(name="eu-class", policy=policy, limit=10**9)
    return {"Authorization": f"Bearer {make_key(license)}"}


def test_residency_serves_and_fails_over_only_among_tagged_connections(client, eu_auth, fakes):
    connect("b", fakes["b"], weight=2, tags=["eu"])
    for _ in range(4):
        answered(chat(client, eu_auth), stream=False)
    assert calls(fakes, "default", "b", "c", "aggregator") == (0, 4, 0, 0)

    fakes["b"].fail_next(503)  # no other eu connection: no failover at all
    assert error(chat(client, eu_auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "c", "aggregator") == (0, 5, 0, 0)
    assert row_of(last_row()) == (
        "direct",
        "b",
        1,
        "direct/b: status_5xx",
        503,
        "provider_unavailable",
    )

    connect("c", fakes["c"], tags=["eu", "on-premises"])  # carries eu, and more
    fakes["b"].fail_next(503)
    answered(chat(client, eu_auth), stream=False)
    assert calls(fakes, "default", "b", "c", "aggregator") == (0, 6, 1, 0)
    assert row_of(last_row()) == ("direct", "c", 2, "direct/b: status_5xx", 200, "")

    fakes["b"].fail_next(503)
    fakes["c"].fail_next(503)
    assert error(chat(client, eu_auth), 503) == UNAVAILABLE
    assert calls(fakes, "default", "b", "c", "aggregator") == (0, 7, 2, 0)


def test_residency_without_a_tagged_connection_is_the_spec_400(client, auth, eu_auth, fakes):
    message = error(chat(client, eu_auth), 400)
    assert message == "No provider available for endpoint 'chat_completions'"
    assert calls(fakes, "default", "b", "aggregator") == (0, 0, 0)
    row = last_row()
    assert (row.attempts, row.status_code, row.error_code, row.credits) == (
        0,
        400,
        "provider_selection",
        0,
    )
    pinned = error(chat(client, eu_auth, pin="direct/default"), 400)
    assert pinned == "No provider available for endpoint 'chat_completions' under the current pins"

    def listed(headers):
        response = client.get("/v1/models", headers=headers)
        assert response.status_code == 200
        return {model["id"] for model in response.json()["data"]}

    assert MINI in listed(auth)
    assert MINI not in listed(eu_auth)
    connect("b", fakes["b"], tags=["eu"])
    assert MINI in listed(eu_auth)


def test_residency_keeps_the_moderation_call_among_tagged_connections(
    client, make_license, make_key, fakes
):
    """The guardrail's moderation call carries the request's texts: under a residency rule it
    goes to a tagged connection too, never to the untagged `default`."""
    from licensing.rules.policy import open_policy_document

    policy = {**open_policy_document(), "routing": {"connection_tags": ["eu"]}}
    license = make_license(name="eu-moderated", policy=policy, limit=10**9)
    license.license_type.guardrails = {
        "input": {"moderation": True},
        "output": {"moderation": True},
    }
    license.license_type.save()
    eu_auth = {"Authorization": f"Bearer {make_key(license)}"}
    connect("b", fakes["b"], tags=["eu"])

    answered(chat(client, eu_auth), stream=False)
    assert calls(fakes, "default", "aggregator") == (0, 0)
    paths = [request.path for request in fakes["b"].requests]
    assert paths == ["/v1/moderations", "/v1/chat/completions", "/v1/moderations"]
    assert row_of(last_row()) == ("direct", "b", 1, "", 200, "")


# --- the shared backend --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A redis-server of this module's own, on a free port."""
    from tests.processes import redis_server_or_skip

    server = redis_server_or_skip(tmp_path_factory.mktemp("redis"))
    yield server.url
    server.stop()


@pytest.mark.slow
def test_the_circuit_through_redis(client, auth, fakes, settings, frozen_clock, redis_url):
    """With REDIS_URL the gateway's circuits are Redis's (shared by every worker): the same
    opening, probe and reopening, and the state stored where the admin and the API read it."""
    import redis

    from catalog.circuit import RedisCircuits, circuits_reset, read_circuits
    from catalog.models import Connection

    url = redis_url
    keys = [circuit_of(c) for c in Connection.objects.filter(provider__slug="direct")]
    settings.REDIS_URL = url
    circuits_reset()
    tune(settings, CIRCUIT_FAILURES=2, CIRCUIT_COOLDOWN=30)
    try:
        fakes["default"].fail_next(503, times=100)
        for _ in range(10):
            assert embed(client, auth).status_code == 200
        assert calls(fakes, "default", "b") == (2, 10)
        default = circuit_of(Connection.objects.get(provider__slug="direct", name="default"))
        stored = read_circuits([default])[default]
        assert (stored.failures, stored.open_until, stored.last_error) == (
            2,
            pytest.approx(frozen_clock.at + 30, abs=1e-3),
            "status_5xx",
        )
        frozen_clock.advance(31)
        for _ in range(4):
            assert embed(client, auth).status_code == 200
        assert calls(fakes, "default", "b") == (3, 14)  # one probe, which reopened it
        assert read_circuits([default])[default].failures == 3
    finally:
        with redis.Redis.from_url(url) as server:
            for key in keys:
                server.delete(RedisCircuits._name(key))


@pytest.mark.slow
def test_one_probe_across_workers_through_redis(
    gateway, client, auth, fakes, settings, frozen_clock, redis_url
):
    """Issue 35: several requests at the end of a cool-down make exactly one call to the dead
    connection, and another worker (its own Redis client, its copy of the circuit read while
    open, as on another host) neither probes meanwhile nor after the probe failed."""
    import asyncio

    from catalog.circuit import RedisCircuits, circuits_reset
    from catalog.models import Connection

    settings.REDIS_URL = redis_url
    circuits_reset()
    tune(settings, CIRCUIT_FAILURES=2, CIRCUIT_COOLDOWN=30)
    default = fakes["default"]
    default.fail_next(503, times=2)
    for _ in range(6):
        assert embed(client, auth).status_code == 200
    key = circuit_of(Connection.objects.get(provider__slug="direct", name="default"))

    def embeddings_calls() -> int:
        return sum(request.path == "/v1/embeddings" for request in default.requests)

    def request(_):
        body = {"model": EMBEDDING, "input": "probe"}
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            return http.post("/v1/embeddings", json=body, headers=auth).status_code

    async def scenario():
        other = RedisCircuits(redis_url)
        assert not await other.admit(key)  # its copy: open
        assert embeddings_calls() == 2
        frozen_clock.advance(31)
        default.fail_next(503)  # the probe fails, once the test lets it answer
        default.hold_when(lambda request: request.path == "/v1/embeddings")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(request, n) for n in range(8)]

            def settled() -> bool:
                return default.holding == 1 and sum(f.done() for f in futures) == 7

            await asyncio.to_thread(wait_until, settled)
            assert not await other.admit(key)  # the gateway's request is the probe
            default.hold_when(None)
            default.release()
            assert [f.result() for f in futures] == [200] * 8
        assert embeddings_calls() == 3  # exactly one probe
        assert not await other.admit(key)  # the probe failed: a new cool-down, for everyone
        for _ in range(4):
            assert (await asyncio.to_thread(embed, client, auth)).status_code == 200
        assert embeddings_calls() == 3
        await other.client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        circuits_reset()


def test_a_probe_whose_client_left_gives_its_slot_back(
    gateway, auth, fakes, settings, frozen_clock
):
    """A probe cut short by its client's leaving has found nothing about the connection: the
    next request probes at once, rather than the connection waiting out the probe's lease."""
    import socket
    from urllib.parse import urlsplit

    import orjson

    tune(settings, CIRCUIT_FAILURES=2, CIRCUIT_COOLDOWN=30)
    default, pin = fakes["default"], {**auth, "X-Service-Provider": "direct/default"}
    default.fail_next(503, times=2)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for _ in range(2):
            assert embed(client, auth, pin="direct/default").status_code == 503
        assert embed(client, auth, pin="direct/default").status_code == 503  # open: no call
        assert len(default.requests) == 2
        frozen_clock.advance(31)
        default.hold_next()  # the probe waits in the fake; its client leaves meanwhile
        body = orjson.dumps({"model": EMBEDDING, "input": "residency"})
        head = "".join(f"{name}: {value}\r\n" for name, value in pin.items())
        url = urlsplit(gateway.url)
        with socket.create_connection((url.hostname, url.port)) as leaving:
            leaving.sendall(
                f"POST /v1/embeddings HTTP/1.1\r\nHost: {url.netloc}\r\n{head}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            wait_until(lambda: default.holding == 1)
        wait_for_ledger(4)
        assert last_row().status_code == 499
        default.release()
        # The next request is the probe, at once: it succeeds and closes the circuit.
        assert embed(client, auth, pin="direct/default").status_code == 200
        assert len(default.requests) == 4
        assert embed(client, auth, pin="direct/default").status_code == 200

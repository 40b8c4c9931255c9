"""Bounds on what the gateway takes from a client and from a provider (README, Decisions:
"Upstream bounds"): at most 2,048 embeddings inputs, answers read up to a byte cap, a bounded wait
for a provider connection, and a per-license share of each provider pool so that one license's
slow calls cannot starve another's. The provider is a fake at the network edge; slow is a fake
holding requests until the test releases them, never a clock."""

from __future__ import annotations

import asyncio
import gzip
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from core.errors import SERVICE_UNAVAILABLE
from licensing.models import Transaction, Wallet
from tests.client_helpers import ledger_rows
from tests.conftest import UPSTREAM_KEY
from tests.kit import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
SMALL = "text-embedding-3-small"
MINI = "gpt-4o-mini"


def embed(client, auth, texts):
    return client.post("/v1/embeddings", json={"model": SMALL, "input": texts}, headers=auth)


def key_of(make_license, make_key, name, limit=1_000_000):
    license = make_license(name=name, limit=limit)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


@pytest.fixture
def own_upstream(catalog, settings):
    """A fake of its own for `direct`: a new connection URL, so the gateway builds a pool for
    it under this test's settings. `configure(**gateway)` sets them first."""
    from catalog.services import connection_configure
    from core.localcache import clear_all
    from fake_upstreams import OpenAIFake, serve

    with serve(OpenAIFake(api_key=UPSTREAM_KEY)) as fake:

        def configure(**gateway):
            settings.GATEWAY = {**settings.GATEWAY, **gateway}
            connection_configure(
                provider_slug="direct", base_url=fake.base_url, api_key=UPSTREAM_KEY
            )
            clear_all()
            return fake

        yield configure
        fake.release()


# --- input: at most 2,048 items ----------------------------------------------------------------


def test_2049_inputs_are_422_too_long_before_any_call(client, catalog, make_license, make_key):
    _, auth = key_of(make_license, make_key, "capped", limit=100)
    response = embed(client, auth, ["x"] * 2049)
    assert response.status_code == 422, response.text
    body = response.json()
    first = body["detail"][0]
    assert (first["type"], first["loc"]) == ("too_long", ["body", "input"])
    assert first["ctx"] == {"field_type": "List", "max_length": 2048, "actual_length": 2049}
    assert len(body["detail"]) == 1
    assert (body["error"]["code"], body["error"]["param"]) == ("too_long", "input")
    assert body["error"]["message"] == (
        "input: List should have at most 2048 items after validation, not 2049"
    )
    # Refused before the pipeline: no provider call, no ledger row, no wallet touched.
    assert catalog["direct"].requests == []
    assert Transaction.objects.count() == 0 and Wallet.objects.count() == 0


def test_2048_inputs_are_answered(client, auth, catalog):
    response = embed(client, auth, [f"text {i}" for i in range(2048)])
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(2048))
    assert len(catalog["direct"].last.json["input"]) == 2048
    row = Transaction.objects.get()
    assert (row.status_code, row.outcome) == (200, "success") and row.credits > 0


# --- answers: read up to a byte cap -------------------------------------------------------------


def test_embeddings_answer_over_its_cap_is_503_recorded_once_not_charged(
    client, catalog, make_license, make_key, settings
):
    cap = settings.GATEWAY["ANSWER_MAX_BYTES"]["embeddings"]  # per input: 2 inputs, twice it
    _, auth = key_of(make_license, make_key, "big-answers", limit=100)
    catalog["direct"].bloat_next(cap)  # padding alone is half the cap of 2 inputs: within
    assert embed(client, auth, ["a", "b"]).status_code == 200
    catalog["direct"].bloat_next(2 * cap)
    response = embed(client, auth, ["a", "b"])
    assert response.status_code == 503, response.text
    assert response.json() == {"error": {"message": SERVICE_UNAVAILABLE}}
    assert len(catalog["direct"].requests) == 2
    ok, failed = Transaction.objects.order_by("id")
    assert ok.status_code == 200 and ok.credits > 0
    assert (failed.status_code, failed.credits, failed.error_code) == (
        503,
        0,
        "provider_unavailable",
    )
    assert f"answer over {2 * cap} bytes" in failed.error_message
    assert Wallet.objects.get().spent == ok.credits


def _gzipped_answer(padding: int) -> bytes:
    answer = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}],
        "model": SMALL,
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
    return gzip.compress(json.dumps(answer).encode() + b" " * padding)


@pytest.mark.parametrize(("padding", "status"), [(0, 200), (64 * 1024 * 1024, 503)])
def test_compressed_answers_are_counted_inflated(client, auth, catalog, padding, status):
    # 64 MiB of JSON in ~64 KB of gzip: the cap (192 KiB for one input) counts what it inflates
    # to, and the inflating stops there.
    body = _gzipped_answer(padding)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    catalog["direct"].fail_next(status=200, body=body, headers=headers)
    response = embed(client, auth, "a")
    assert response.status_code == status, response.text
    if status == 200:
        assert response.json()["data"][0]["embedding"] == [0.25, -0.5]
    row = Transaction.objects.get()
    assert (row.status_code, row.credits > 0) == (status, status == 200)


def test_chat_answer_over_its_cap_is_503(client, auth, catalog, settings):
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "chat": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    catalog["direct"].bloat_next(64 * 1024)
    body = {"model": MINI, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 503, response.text
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "provider_unavailable")


def test_stream_over_its_cap_ends_with_the_in_stream_503(client, auth, catalog, settings):
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "stream": 600}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    catalog["direct"].chunk_delay = 0.02  # every event its own read: the first is under the cap
    body = {"model": MINI, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-2:] == [
        'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}',
        "data: [DONE]",
    ]
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")


def test_stream_over_its_cap_before_its_first_byte_is_a_503_not_retried(
    client, auth, catalog, settings
):
    """The first read is already past the cap: nothing reached the client, so it is the JSON
    503; as for any answer too large, no other connection or row is tried (its answer would be
    as large, inference.failover)."""
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "stream": 100}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    body = {"model": MINI, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["message"] == "Service temporarily unavailable"
    assert (len(catalog["direct"].requests), len(catalog["aggregator"].requests)) == (1, 0)
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits, row.error_code, row.attempts, row.failovers) == (
        503,
        0,
        "provider_unavailable",
        1,
        "",
    )


def test_an_event_over_its_cap_ends_the_stream_unrelayed(client, auth, catalog, settings):
    # An upstream whose "event" never ends: without the cap the decoder would hold all of it
    # and relay it when the upstream closes; with it, reading stops at the cap.
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "event": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    endless = b"data: " + b"x" * (256 * 1024)
    catalog["direct"].fail_next(200, endless, headers={"Content-Type": "text/event-stream"})
    body = {"model": MINI, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    assert [e for e in response.text.split("\n\n") if e] == [
        'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}',
        "data: [DONE]",
    ]
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")


# --- waits: a bounded wait for a connection, a share of the pool per license -------------------


def _post_all(url, jobs):
    """Each (auth, texts) posted at once, each on a client of its own; the futures. A job
    (auth, path, body) posts `body` to `path`."""

    def post(job):
        if len(job) == 2:
            job = (job[0], "/v1/embeddings", {"model": SMALL, "input": job[1]})
        auth, path, body = job
        with httpx.Client(base_url=url, timeout=60) as http:
            return http.post(path, json=body, headers=auth)

    pool = ThreadPoolExecutor(len(jobs))
    futures = [pool.submit(post, job) for job in jobs]
    pool.shutdown(wait=False)
    return futures


def _share_waiters(fake, license_id) -> int:
    """Requests of the license waiting in the gateway for its share of the fake's pool."""
    from inference.providers import _ADAPTERS

    for upstream_key, upstream in _ADAPTERS["openai"]._upstreams.items():
        if upstream_key[1] == fake.base_url:
            share = upstream._shares.get(license_id)
            return len(share._waiters or ()) if share is not None else 0
    return 0


SLOW_STREAM = {
    "model": MINI,
    "messages": [{"role": "user", "content": "slow"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


@pytest.mark.parametrize("slow_calls", ["embeddings", "streams"])
def test_a_slow_license_cannot_starve_another(
    gateway, client, own_upstream, make_license, make_key, slow_calls
):
    # A pool of 4 connections, 2 per license; the slow license sends 4 calls the fake holds.
    fake = own_upstream(UPSTREAM_MAX_CONNECTIONS=4, UPSTREAM_LICENSE_SHARE=0.5)
    fake.hold_when(lambda request: "quick" not in request.text)
    slow, slow_auth = key_of(make_license, make_key, "slow")
    _, other_auth = key_of(make_license, make_key, "other")
    slow_job = (slow_auth, ["slow"])
    if slow_calls == "streams":
        slow_job = (slow_auth, "/v1/chat/completions", SLOW_STREAM)
    held = _post_all(gateway.url, [slow_job] * 4)
    wait_until(
        lambda: fake.holding == 2 and _share_waiters(fake, slow.id) == 2, timeout=20, every=0.01
    )
    # The other license gets a connection at once, while the slow one's calls are still held.
    response = embed(client, other_auth, ["quick"])
    assert response.status_code == 200, response.text
    assert fake.holding == 2 and not any(f.done() for f in held)
    assert len(fake.requests) == 3 and "quick" in fake.requests[-1].text
    fake.release()
    fake.hold_when(None)
    assert [f.result().status_code for f in held] == [200] * 4
    assert [row.status_code for row in ledger_rows(5)] == [200] * 5


def test_streams_give_their_slot_back(client, own_upstream, make_license, make_key):
    # One slot per license: a stream that kept its slot would make the next call 503.
    own_upstream(UPSTREAM_MAX_CONNECTIONS=2, UPSTREAM_LICENSE_SHARE=0.5, UPSTREAM_POOL_WAIT=5)
    _, auth = key_of(make_license, make_key, "streams")
    for _ in range(3):
        response = client.post("/v1/chat/completions", json=SLOW_STREAM, headers=auth)
        assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    with client.stream("POST", "/v1/chat/completions", json=SLOW_STREAM, headers=auth) as left:
        next(left.iter_bytes())  # the client leaves after the first bytes (or the stream ended)
    assert embed(client, auth, ["after"]).status_code == 200
    assert {row.status_code for row in ledger_rows(5)} <= {200, 499}


@pytest.mark.parametrize(
    ("gateway_settings", "same_license"),
    [
        # The pool's one connection is taken (by another license): no slot within the wait.
        ({"UPSTREAM_MAX_CONNECTIONS": 1, "UPSTREAM_LICENSE_SHARE": 1.0}, False),
        # The license's one slot (half of 2) is taken: its second call waits, then 503.
        ({"UPSTREAM_MAX_CONNECTIONS": 2, "UPSTREAM_LICENSE_SHARE": 0.5}, True),
    ],
    ids=["pool", "license-share"],
)
def test_no_connection_within_the_wait_is_503(
    gateway, client, own_upstream, make_license, make_key, gateway_settings, same_license
):
    budget = {"UPSTREAM_POOL_WAIT": 0.2, "UPSTREAM_CONNECT_TIMEOUT": 0.2}
    fake = own_upstream(**gateway_settings, **budget)
    fake.hold_next()
    _, first_auth = key_of(make_license, make_key, "first")
    _, second_auth = (None, first_auth) if same_license else key_of(make_license, make_key, "2nd")
    (held,) = _post_all(gateway.url, [(first_auth, ["first"])])
    wait_until(lambda: fake.holding == 1, timeout=20, every=0.01)
    response = embed(client, second_auth, ["second"])
    assert response.status_code == 503, response.text
    assert response.json() == {"error": {"message": SERVICE_UNAVAILABLE}}
    assert [r.json["input"] for r in fake.requests] == [["first"]]  # never sent
    fake.release()
    assert held.result().status_code == 200
    rows = ledger_rows(2)
    assert sorted((r.status_code, r.credits > 0, r.error_code, r.failovers) for r in rows) == [
        (200, True, "", ""),
        (503, False, "provider_unavailable", "direct/default: pool_wait"),
    ]
    # Our own pool was busy, not the provider: nothing counted against the connection.
    circuit = _circuit_of_direct()
    assert circuit is None or (circuit.failures, circuit.open_until) == (0, 0.0)


def _circuit_of_direct():
    from catalog.circuit import circuit_key, read_circuits
    from catalog.models import Connection

    connection = Connection.objects.get(provider__slug="direct", name="default")
    key = circuit_key("direct", "default", connection.updated_at.timestamp())
    return read_circuits([key]).get(key)


def test_a_license_waiting_for_its_share_does_not_open_the_circuit(
    gateway, client, own_upstream, make_license, make_key, settings
):
    """Issue 35: one license's burst past its share of a connection's pool is not the provider
    failing. License A holds its two slots with streams the fake keeps open (released by the
    test, no clock), its next three calls wait past the (tiny) pool wait: three 503s, which
    used to count as three failures and open the connection's circuit (two open it here) for
    every license. B is then served, with a provider call, and the circuit stays closed."""
    from catalog.circuit import circuits_reset

    circuits_reset()
    fake = own_upstream(
        UPSTREAM_MAX_CONNECTIONS=4,
        UPSTREAM_LICENSE_SHARE=0.5,
        UPSTREAM_POOL_WAIT=0.05,
        CIRCUIT_FAILURES=2,
    )
    fake.hold_when(lambda request: "slow" in request.text)
    _, a_auth = key_of(make_license, make_key, "a")
    _, b_auth = key_of(make_license, make_key, "b")
    held = _post_all(gateway.url, [(a_auth, "/v1/chat/completions", SLOW_STREAM)] * 2)
    wait_until(lambda: fake.holding == 2, timeout=20, every=0.01)
    for _ in range(3):  # embeddings: no other route to fail over to
        response = embed(client, a_auth, ["over the share"])
        assert response.status_code == 503, response.text
        assert response.json() == {"error": {"message": SERVICE_UNAVAILABLE}}
    circuit = _circuit_of_direct()
    assert circuit is None or (circuit.failures, circuit.open_until) == (0, 0.0)

    response = embed(client, b_auth, ["quick"])
    assert response.status_code == 200, response.text
    assert len(fake.requests) == 3 and "quick" in fake.requests[-1].text
    fake.release()
    fake.hold_when(None)
    assert [f.result().status_code for f in held] == [200] * 2
    rows = ledger_rows(6)
    refused = [r for r in rows if r.status_code == 503]
    assert [(r.error_code, r.attempts, r.failovers, r.credits) for r in refused] == [
        ("provider_unavailable", 1, "direct/default: pool_wait", 0)
    ] * 3
    circuit = _circuit_of_direct()
    assert circuit is None or (circuit.failures, circuit.open_until) == (0, 0.0)
    circuits_reset()


def test_a_stream_never_relayed_gives_its_slot_back():
    """A stream dropped unread (its client gone before the relay began) frees its license's
    slot when it is collected, not never."""
    from inference.providers.pool import StreamedAnswer

    class Answer:
        status = 200

        def release(self):
            pass

    async def main():
        share = asyncio.Semaphore(1)
        await share.acquire()
        StreamedAnswer(Answer(), share, max_bytes=1)  # dropped at once
        await asyncio.sleep(0)  # one turn of the loop: the release the finalizer scheduled
        return share.locked()

    assert asyncio.run(main()) is False

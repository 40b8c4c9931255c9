"""The live feed end to end: real API requests (the official openai SDK) against a running
gateway reach a viewer's real websocket, a refused one with its reason; a hanging channel layer
does not slow a request; a viewer that does not read loses rows, and the server's memory stays
bounded; with Redis, a row served by one worker process reaches a viewer on another."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import pytest
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from openai import OpenAI, PermissionDeniedError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from licensing.console.consumers import PATH
from licensing.ledger import feed
from licensing.models import Transaction
from tests.kit import wait_until
from tests.live_helpers import feed_entry, session_cookie, staff_user
from tests.processes import redis_server_or_skip, running_workers

SMALL = "text-embedding-3-small"


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch):
    monkeypatch.setattr(feed, "stats", feed.Stats())


@pytest.fixture
def root_cookie(transactional_db):
    return session_cookie(get_user_model().objects.create_superuser("root", password="pw"))


def viewer(base_url: str, cookie: str, **options):
    """A browser's websocket to the feed: the admin's cookie, the page's own origin."""
    url = "ws" + base_url.removeprefix("http") + PATH
    headers = {"Cookie": cookie}
    return connect(url, additional_headers=headers, origin=base_url, open_timeout=10, **options)


def wait_for_viewers(count: int, timeout: float = 5.0) -> None:
    wait_until(
        lambda: feed.viewers == count,
        timeout=timeout,
        every=0.01,
        what=lambda: f"{feed.viewers} viewers, expected {count}",
    )


def event_for(ws, request_id: str, timeout: float = 10.0) -> dict:
    """The event of `request_id`, skipping any other row the feed brings first."""
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        assert message["type"] == "rows"
        for row in message["rows"]:
            if row["request_id"] == request_id:
                return row


def sdk(base_url: str, key: str) -> OpenAI:
    return OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=30)


def test_a_request_reaches_a_connected_viewer(gateway, catalog, license, api_key, root_cookie):
    with viewer(gateway.url, root_cookie) as ws:
        wait_for_viewers(1)
        raw = sdk(gateway.url, api_key).embeddings.with_raw_response.create(
            model=SMALL, input="hello live feed", encoding_format="float"
        )
        request_id = raw.headers["x-request-id"]
        answer = raw.parse()
        event = event_for(ws, request_id)
    row = Transaction.objects.get(request_id=request_id)
    assert row.credits > 0 and answer.usage.model_extra["credits_used"] == row.credits
    # Named by the viewer's consumer (the publisher sends ids only): the key by its name.
    assert event.pop("holder") == f"key {row.api_key.name or row.api_key.prefix + '…'}"
    assert event == {
        "created_at": row.created_at.isoformat(timespec="milliseconds"),
        "request_id": request_id,
        "license": license.name,
        "api_key_id": row.api_key_id,
        "end_user_id": None,
        "service": "embeddings",
        "requested_model": SMALL,
        "provider": "direct",
        "status_code": 200,
        "outcome": "success",
        "error_code": "",
        "error_message": "",
        "credits": row.credits,
        "total_tokens": row.total_tokens,
        "images": None,
        "upstream_id": row.upstream_id,
        "latency_ms": row.latency_ms,
    }


def test_a_refused_request_reaches_the_viewer_with_its_reason(
    gateway, catalog, make_license, make_key, root_cookie
):
    license = make_license(
        name="images-only", policy={"version": 1, "services": {"image_generation": {}}}
    )
    key = make_key(license)
    with viewer(gateway.url, root_cookie) as ws:
        wait_for_viewers(1)
        with pytest.raises(PermissionDeniedError) as refused:
            sdk(gateway.url, key).embeddings.create(model=SMALL, input="x", encoding_format="float")
        request_id = refused.value.response.headers["x-request-id"]
        event = event_for(ws, request_id)
    reason = "service 'embeddings' is not enabled for this license"
    assert refused.value.body["message"] == reason
    assert (event["status_code"], event["outcome"], event["credits"]) == (403, "denied", 0)
    assert (event["error_code"], event["error_message"]) == ("policy_denied", reason)
    assert event["license"] == "images-only"
    assert Transaction.objects.get(request_id=request_id).error_code == "policy_denied"


def test_a_viewer_of_another_institution_sees_nothing(
    gateway, catalog, license, api_key, make_license
):
    other = make_license(name="elsewhere", institution="Other school")
    cookie = session_cookie(staff_user("rita", institution=other.institution, role="reviewer"))
    with viewer(gateway.url, cookie) as ws:
        wait_for_viewers(1)
        sdk(gateway.url, api_key).embeddings.create(model=SMALL, input="x", encoding_format="float")
        with pytest.raises(TimeoutError):
            ws.recv(timeout=1.0)


def test_a_refused_viewer_gets_no_websocket(gateway, transactional_db):
    cookie = session_cookie(staff_user("no-role"))
    with pytest.raises(InvalidStatus) as refused:
        viewer(gateway.url, cookie)
    assert refused.value.response.status_code == 403
    root = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))
    url = "ws" + gateway.url.removeprefix("http") + PATH
    with pytest.raises(InvalidStatus):  # the admin's cookie, from another site's page
        connect(url, additional_headers={"Cookie": root}, origin="http://evil.example")


def test_a_hanging_layer_does_not_slow_a_request(
    gateway, catalog, api_key, root_cookie, monkeypatch
):
    async def hang(group, message):
        await asyncio.sleep(3600)

    layer = get_channel_layer()
    monkeypatch.setattr(feed, "SEND_TIMEOUT", 3.0)
    client = sdk(gateway.url, api_key)
    with viewer(gateway.url, root_cookie) as ws:
        wait_for_viewers(1)
        layer.group_send = hang
        try:
            took = []
            for _ in range(3):
                started = time.perf_counter()
                client.embeddings.create(model=SMALL, input="x", encoding_format="float")
                took.append(time.perf_counter() - started)
            assert max(took) < 1.5, took  # a request that waited for the layer would take 3 s
            wait_until(lambda: feed.stats.failed == 1)  # the first send timed out, in its own task
        finally:
            del layer.group_send  # the layer answers again: the rows queued behind it go out
        wait_until(lambda: feed.stats.failed + feed.stats.sent == 6)
        assert len(json.loads(ws.recv(timeout=5))["rows"]) == 2
    assert Transaction.objects.count() == 3
    print(f"requests with a hanging layer: {[round(t * 1000) for t in took]} ms")


def test_a_viewer_that_does_not_read_loses_rows_and_memory_stays_bounded(
    gateway, catalog, license, root_cookie, monkeypatch
):
    """50,000 rows (~25 MB of JSON) published while the viewer reads nothing: once the socket's
    buffers are full the layer holds at most `capacity` messages for it and drops the rest; the
    server's Python heap grows by a few MB, not by the ~50 MB those rows' events would take if
    they were buffered. (Without compression: these repetitive rows would deflate so well that
    the socket took them all.)"""
    total, chunk = 50_000, 500
    entries = [feed_entry(license, f"flood-{i}") for i in range(chunk)]
    layer = get_channel_layer()
    capacity = layer.capacity

    async def flood():
        for _ in range(total // chunk):
            feed.publish(entries)
            while feed._publisher().queue:  # the layer takes them (none dropped before it)
                await asyncio.sleep(0.001)

    # No keepalive either way (the server's is read per connection): a viewer that reads
    # nothing answers no ping either, a loaded machine can take longer than the ping's 20 s
    # deadline to flood it, and this test is about buffering, not keepalive.
    monkeypatch.setattr(gateway.server.config, "ws_ping_interval", None)
    # The layer's messages expire after 60 s, and a channel left with none is removed: a loaded
    # machine's flood can outlast that, and the held messages this test counts must stay.
    monkeypatch.setattr(layer, "expiry", 3600)
    with viewer(gateway.url, root_cookie, compression=None, ping_interval=None) as ws:
        wait_for_viewers(1)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            asyncio.run_coroutine_threadsafe(flood(), gateway.loop).result(timeout=300)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        held = [queue.qsize() for queue in layer.channels.values()]
        received = 0
        try:
            while True:
                received += len(json.loads(ws.recv(timeout=2.0))["rows"])
        except TimeoutError:
            pass
    print(
        f"published {total} rows to a viewer that did not read: it got {received}; "
        f"heap +{grown / 1e6:.1f} MB; {feed.stats}"
    )
    assert len(held) == 1 and 0 < held[0] <= capacity  # the rest were dropped
    # The layer took every message (to the all group and to the institution's); none was
    # dropped before it.
    assert feed.stats.sent == 2 * total and feed.stats.dropped == 0
    assert received < total * 0.8
    assert grown < 20e6


# --- several processes, through Redis -------------------------------------------------------


@pytest.fixture
def redis_url(tmp_path):
    server = redis_server_or_skip(tmp_path)
    yield server.url
    server.stop()


@pytest.fixture
def two_workers(catalog, redis_url, tmp_path):
    """Two uvicorn processes on the test database that share the feed through Redis."""

    def env(n):
        return {"REDIS_URL": redis_url, "GATEWAY_INVALIDATION_FILE": str(tmp_path / f"worker-{n}")}

    with running_workers(2, tmp_path, env) as workers:
        yield workers


@pytest.mark.slow
def test_a_row_served_by_one_worker_reaches_a_viewer_on_another(
    two_workers, license, api_key, root_cookie
):
    watched, serving = two_workers
    with viewer(watched.url, root_cookie) as ws:
        raw = sdk(serving.url, api_key).embeddings.with_raw_response.create(
            model=SMALL, input="across processes", encoding_format="float"
        )
        request_id = raw.headers["x-request-id"]
        event = event_for(ws, request_id)
    row = Transaction.objects.get(request_id=request_id)
    assert (event["status_code"], event["credits"]) == (200, row.credits)


def test_redis_drops_for_a_full_channel_instead_of_buffering(redis_url, settings):
    from channels_redis.core import RedisChannelLayer

    config = {**settings.CHANNEL_LAYERS["default"]["CONFIG"], "hosts": [redis_url]}
    capacity = config["capacity"]

    async def scenario():
        layer = RedisChannelLayer(**config)
        try:
            slow = await layer.new_channel()
            await layer.group_add("ledger.all", slow)
            for i in range(capacity + 200):
                await layer.group_send("ledger.all", {"type": "ledger.rows", "rows": [i]})
            key = layer.prefix + layer.non_local_name(slow)  # the process's messages
            stored = await layer.connection(0).zcard(key)
            received = []
            while True:
                try:
                    message = await asyncio.wait_for(layer.receive(slow), 0.5)
                except TimeoutError:
                    return stored, received
                received.append(message["rows"][0])
        finally:
            await layer.flush()
            await layer.close_pools()

    stored, received = asyncio.run(scenario())
    assert stored == capacity
    assert received == list(range(capacity))

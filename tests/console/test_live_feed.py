"""The live feed in one process: `publish` never blocks or raises (a full queue drops and counts,
a failing or hanging layer stays in its task), the channel layer drops for a slow consumer
instead of buffering, the websocket consumer lets in exactly the staff who may view
transactions (each its own institution's rows, superusers every row), and the page."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from licensing.console import consumers, live
from licensing.console.consumers import PATH, websocket_application
from licensing.ledger import feed as ledger_feed
from licensing.models import AdminProfile, Transaction
from tests.live_helpers import WebsocketCommunicator, feed_entry, session_cookie, staff_user

LIVE_URL = "/admin/licensing/transaction/live/"


@pytest.fixture(autouse=True)
def fresh_feed(monkeypatch):
    """Each test starts with no viewer, zero counts and an empty in-memory layer."""
    monkeypatch.setattr(ledger_feed, "viewers", 0)
    monkeypatch.setattr(ledger_feed, "stats", ledger_feed.Stats())
    layer = get_channel_layer()
    layer.channels.clear()
    layer.groups.clear()
    yield layer


@pytest.fixture
def institutions(make_license):
    return {
        "a": make_license(name="license-a", institution="School A"),
        "b": make_license(name="license-b", institution="School B"),
    }


def run(scenario, *args):
    """An async scenario on an event loop of its own; the ORM calls of `database_sync_to_async`
    come back to this thread (the test's connection)."""
    return async_to_sync(scenario)(*args)


def communicator(
    cookie: str | None = None, origin: str | None = "http://testserver", host="testserver"
):
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(websocket_application(), PATH, headers=headers)


async def rows_of(feed, timeout=2.0) -> list[str]:
    message = await feed.receive_json_from(timeout=timeout)
    assert message["type"] == "rows"
    return [row["request_id"] for row in message["rows"]]


async def every_row(feed) -> list[str]:
    """The request ids of every row the feed brings until it falls silent."""
    ids = await rows_of(feed)
    while not await feed.receive_nothing(timeout=0.3):
        ids += await rows_of(feed)
    return ids


# --- publish --------------------------------------------------------------------------------


class HangingLayer:
    """A channel layer whose group_send never returns."""

    def __init__(self):
        self.calls = 0

    async def group_send(self, group, message):
        self.calls += 1
        await asyncio.sleep(3600)


class FailingLayer:
    async def group_send(self, group, message):
        raise ConnectionError("the layer is down")


def test_nobody_watching_costs_a_counter_check(institutions):
    entries = [feed_entry(institutions["a"], "req-1")]

    async def scenario():
        calls = 200_000
        started = time.perf_counter()
        for _ in range(calls):
            ledger_feed.publish(entries)
        per_call = (time.perf_counter() - started) / calls
        await asyncio.sleep(0)
        return per_call

    per_call = run(scenario)
    print(f"publish() with nobody watching: {per_call * 1e9:.0f} ns per call")
    assert per_call < 5e-6
    assert ledger_feed.stats == ledger_feed.Stats()  # nothing queued, nothing sent


def test_a_full_queue_drops_and_counts_without_blocking(institutions, monkeypatch):
    layer = HangingLayer()
    monkeypatch.setattr(ledger_feed, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(ledger_feed, "viewers", 1)
    entries = [feed_entry(institutions["a"], f"req-{i}") for i in range(10)]

    async def scenario():
        took = []
        for _ in range(ledger_feed.QUEUE_MAX // 10 + 50):
            started = time.perf_counter()
            ledger_feed.publish(entries)
            took.append(time.perf_counter() - started)
            await asyncio.sleep(0)  # the sending task runs, and hangs in group_send
        publisher = ledger_feed._publisher()
        waiting = len(publisher.queue)
        publisher.task.cancel()
        return sorted(took), waiting

    took, waiting = run(scenario)
    assert layer.calls == 1  # the first batch went to the layer and never came back
    # Every call returned although the layer never answers; a typical one in microseconds.
    assert took[len(took) // 2] < 1e-3, took[len(took) // 2]
    assert waiting == ledger_feed.QUEUE_MAX
    assert (
        ledger_feed.stats.dropped
        == (ledger_feed.QUEUE_MAX // 10 + 50) * 10 - ledger_feed.QUEUE_MAX - 10
    )


def test_a_hanging_layer_times_out_and_the_feed_goes_on(institutions, monkeypatch):
    hanging = HangingLayer()
    monkeypatch.setattr(ledger_feed, "get_channel_layer", lambda: hanging)
    monkeypatch.setattr(ledger_feed, "SEND_TIMEOUT", 0.2)
    monkeypatch.setattr(ledger_feed, "viewers", 1)

    async def scenario():
        ledger_feed.publish([feed_entry(institutions["a"], "req-1")])
        await asyncio.sleep(0)  # the task takes req-1 and hangs on it
        ledger_feed.publish([feed_entry(institutions["b"], "req-2")])  # queued behind the hang
        await asyncio.wait_for(ledger_feed._publisher().task, 5)

    run(scenario)
    # Each message (req-1 and req-2 to the all group, each to its institution's) waited once.
    assert hanging.calls == 4
    assert ledger_feed.stats.failed == 4 and ledger_feed.stats.sent == 0


def test_a_failing_layer_never_reaches_the_caller(institutions, monkeypatch):
    monkeypatch.setattr(ledger_feed, "get_channel_layer", lambda: FailingLayer())
    monkeypatch.setattr(ledger_feed, "viewers", 1)

    async def scenario():
        ledger_feed.publish([feed_entry(institutions["a"], "req-1")])
        await asyncio.wait_for(ledger_feed._publisher().task, 5)

    run(scenario)
    assert ledger_feed.stats.failed == 2  # the all group and the institution's


def test_publish_outside_an_event_loop_is_counted_not_raised(institutions, monkeypatch):
    monkeypatch.setattr(ledger_feed, "viewers", 1)
    ledger_feed.publish([feed_entry(institutions["a"], "req-1")])
    assert ledger_feed.stats.failed == 1


def test_a_bad_entry_is_counted_not_raised(monkeypatch):
    monkeypatch.setattr(ledger_feed, "viewers", 1)

    async def scenario():
        ledger_feed.publish([object()])

    run(scenario)
    assert ledger_feed.stats.failed == 1


def test_rows_go_to_their_institution_and_to_everyone_in_bounded_messages():
    a, b = {"request_id": "a"}, {"request_id": "b"}
    batch = [(1, a)] * (ledger_feed.ROWS_PER_MESSAGE + 1) + [(2, b), (None, b)]
    messages = [(group, len(rows)) for group, rows in ledger_feed._messages(batch)]
    assert messages == [
        ("ledger.all", ledger_feed.ROWS_PER_MESSAGE),
        ("ledger.all", 3),
        ("ledger.institution.1", ledger_feed.ROWS_PER_MESSAGE),
        ("ledger.institution.1", 1),
        ("ledger.institution.2", 1),
    ]


def test_the_event_of_a_row(institutions):
    entry = feed_entry(
        institutions["a"],
        "req-1",
        api_key_id=None,
        end_user_id=None,
        status_code=403,
        outcome="denied",
        error_code="policy_denied",
        error_message="service 'embeddings' is not enabled for this license",
        provider="",
        attempts=0,  # refused before any provider call
        credits=0,
        total_tokens=None,
    )
    event = ledger_feed.event_of(entry, entry.license_name)
    assert event == {
        "created_at": entry.created_at.isoformat(timespec="milliseconds"),
        "request_id": "req-1",
        "license": "license-a",
        "api_key_id": None,
        "end_user_id": None,
        "service": "embeddings",
        "requested_model": "text-embedding-3-small",
        "provider": "",
        "status_code": 403,
        "outcome": "denied",
        "error_code": "policy_denied",
        "error_message": "service 'embeddings' is not enabled for this license",
        "credits": 0,
        "total_tokens": None,
        "images": None,
        "upstream_id": "",
        "latency_ms": 0,
    }
    assert event["created_at"].endswith("+00:00")


# --- the channel layer: a slow consumer loses messages, memory stays bounded ------------------


def test_the_layer_drops_for_a_full_channel_instead_of_buffering(fresh_feed):
    from django.conf import settings

    capacity = settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"]
    assert capacity <= 100 and settings.CHANNEL_LAYERS["default"]["CONFIG"]["expiry"] <= 30
    layer = fresh_feed

    async def scenario():
        slow = await layer.new_channel()
        await layer.group_add("ledger.all", slow)
        for i in range(capacity + 500):
            await layer.group_send("ledger.all", {"type": "ledger.rows", "rows": [{"n": i}]})
        held = layer.channels[slow].qsize()
        received = [(await layer.receive(slow))["rows"][0]["n"] for _ in range(held)]
        return held, received

    held, received = run(scenario)
    assert held == capacity  # the other 500 were dropped in group_send
    assert received == list(range(capacity))


def test_an_expired_consumer_is_let_back_into_its_group(fresh_feed, monkeypatch):
    """The in-memory layer drops a channel from its groups when a message expires unread; the
    consumer's heartbeat joins again."""
    layer = fresh_feed
    monkeypatch.setattr(layer, "expiry", 0.05)

    async def scenario():
        slow = await layer.new_channel()
        await layer.group_add("ledger.all", slow)
        await layer.group_send("ledger.all", {"type": "ledger.rows", "rows": []})
        await asyncio.sleep(0.1)
        await layer.group_send("ledger.all", {"type": "ledger.rows", "rows": []})
        evicted = slow not in layer.groups.get("ledger.all", {})
        await layer.group_add("ledger.all", slow)  # what the heartbeat does
        return evicted, slow in layer.groups["ledger.all"]

    assert run(scenario) == (True, True)


# --- the consumer -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["anonymous", "not staff", "staff without a role", "inactive"])
def test_who_is_refused(who, institutions):
    cookie = None
    if who == "not staff":
        user = get_user_model().objects.create_user("visitor", password="pw")
        cookie = session_cookie(user)
    elif who == "staff without a role":
        cookie = session_cookie(staff_user("no-role"))
    elif who == "inactive":
        user = staff_user("gone", institution=institutions["a"].institution, role="reviewer")
        cookie = session_cookie(user)
        user.is_active = False
        user.save()

    async def scenario():
        feed = communicator(cookie)
        connected, code = await feed.connect()
        return connected, code

    assert run(scenario) == (False, consumers.REFUSED)
    assert ledger_feed.viewers == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://testserver.evil.example", "null"]
)
def test_another_sites_page_is_refused_even_with_the_cookie(origin):
    cookie = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def scenario():
        connected, code = await communicator(cookie, origin=origin).connect()
        same_site, _ = await communicator(cookie).connect()
        return connected, code, same_site

    assert run(scenario) == (False, consumers.REFUSED, True)


@pytest.mark.django_db(transaction=True)
def test_allowed_hosts_are_checked_first_and_trusted_origins_let_in():
    cookie = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def connect(origin):
        connected, _ = await communicator(cookie, origin=origin).connect()
        return connected

    with override_settings(ALLOWED_HOSTS=["gateway.example.edu"]):
        # Built again: the validator reads ALLOWED_HOSTS when it is made.
        assert run(connect, "http://testserver") is False
    with override_settings(CSRF_TRUSTED_ORIGINS=["https://admin.example.edu"]):
        assert run(connect, "https://admin.example.edu") is True


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "origin, accepted",
    [
        ("http://testserver", True),
        ("http://testserver:80", True),  # the default port, written out
        ("HTTP://TestServer", True),
        ("https://testserver", False),  # the page was not served over https
        ("https://testserver:80", False),
        ("http://testserver:8000", False),
        ("ws://testserver", False),
        ("http://user@testserver.evil.example", False),
        ("http://testserver:99999", False),
    ],
)
def test_the_origin_must_match_scheme_host_and_port(origin, accepted):
    """On a plain http listener (the scope's scheme is ws), only the http origin of the page's
    own host and port is the page's; an https one is another origin."""
    cookie = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def scenario():
        connected, _ = await communicator(cookie, origin=origin).connect()
        return connected

    assert run(scenario) is accepted


@pytest.mark.django_db(transaction=True)
def test_a_forged_host_and_origin_pair_does_not_vouch_for_itself_under_a_star():
    """ALLOWED_HOSTS=*: the Host is whatever the client says, so the request's own origin is
    trusted only for loopback hosts (a browser on the same machine); any other needs
    CSRF_TRUSTED_ORIGINS, scheme and port included."""
    cookie = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def connect(host, origin):
        connected, _ = await communicator(cookie, origin=origin, host=host).connect()
        return connected

    with override_settings(ALLOWED_HOSTS=["*"], CSRF_TRUSTED_ORIGINS=[]):
        assert run(connect, "evil.example", "http://evil.example") is False
        assert run(connect, "gateway.example.edu", "http://gateway.example.edu") is False
        assert run(connect, "127.0.0.1:8000", "http://127.0.0.1:8000") is True
        assert run(connect, "localhost:8000", "http://localhost:8000") is True
        assert run(connect, "[::1]:8000", "http://[::1]:8000") is True
        assert run(connect, "127.0.0.1:8000", "http://127.0.0.1:8001") is False
    trusted = ["https://gateway.example.edu"]
    with override_settings(ALLOWED_HOSTS=["*"], CSRF_TRUSTED_ORIGINS=trusted):
        assert run(connect, "gateway.example.edu", "https://gateway.example.edu") is True
        assert run(connect, "evil.example", "https://gateway.example.edu:443") is True
        assert run(connect, "gateway.example.edu", "http://gateway.example.edu") is False
        assert run(connect, "gateway.example.edu", "https://gateway.example.edu:8443") is False
        assert run(connect, "evil.example", "http://evil.example") is False
    # ALLOWED_HOSTS naming the host: the request's own origin is the page's again.
    with override_settings(ALLOWED_HOSTS=["gateway.example.edu"], CSRF_TRUSTED_ORIGINS=[]):
        assert run(connect, "gateway.example.edu", "http://gateway.example.edu") is True
        assert run(connect, "gateway.example.edu", "https://gateway.example.edu") is False


def test_the_page_scheme_comes_from_the_connection_or_the_proxy_header():
    """wss (TLS, or a trusted proxy's X-Forwarded-Proto rewritten by the server) makes the
    page's origin https; so does SECURE_PROXY_SSL_HEADER when set and sent, as for Django's
    own CSRF check of the admin's forms."""

    def scope(origin, scheme="ws", **headers):
        sent = [(b"host", b"gateway.example.edu"), (b"origin", origin.encode())]
        sent += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
        return {"type": "websocket", "scheme": scheme, "headers": sent}

    https, http = "https://gateway.example.edu", "http://gateway.example.edu"
    proxy = ("HTTP_X_FORWARDED_PROTO", "https")
    with override_settings(ALLOWED_HOSTS=["gateway.example.edu"], CSRF_TRUSTED_ORIGINS=[]):
        assert consumers.same_origin(scope(https, "wss"))
        assert not consumers.same_origin(scope(http, "wss"))
        assert not consumers.same_origin(scope(https, x_forwarded_proto="https"))  # not set
        with override_settings(SECURE_PROXY_SSL_HEADER=proxy):
            assert consumers.same_origin(scope(https, x_forwarded_proto="https"))
            assert consumers.same_origin(scope(https, x_forwarded_proto="https, http"))
            assert not consumers.same_origin(scope(https, "wss", x_forwarded_proto="http"))
            assert consumers.same_origin(scope(https, "wss"))  # header absent: the connection
        assert consumers.same_origin({"type": "websocket", "headers": []})  # not a browser
        for bad in ("null", "", "file://", "http://", "http://[::1", "javascript:alert(1)"):
            assert not consumers.same_origin(scope(bad)), bad


def test_trusted_origins_match_scheme_host_port_and_wildcards():
    match = consumers.trusted_origin
    parse = consumers.parse_origin
    assert match(parse("https://gateway.example.edu"), "https://gateway.example.edu")
    assert match(parse("https://gateway.example.edu:443"), "https://GATEWAY.example.edu/")
    assert not match(parse("http://gateway.example.edu"), "https://gateway.example.edu")
    assert not match(parse("https://gateway.example.edu:8443"), "https://gateway.example.edu")
    assert match(parse("https://gateway.example.edu:8443"), "https://gateway.example.edu:8443")
    # "*." as in Django's CSRF_TRUSTED_ORIGINS: the domain and its subdomains, nothing else.
    assert match(parse("https://a.example.edu"), "https://*.example.edu")
    assert match(parse("https://example.edu"), "https://*.example.edu")
    assert not match(parse("https://evilexample.edu"), "https://*.example.edu")
    assert not match(parse("https://example.edu.evil.example"), "https://*.example.edu")
    assert not match(parse("http://a.example.edu"), "https://*.example.edu")
    assert not match(parse("https://a.example.edu"), "gateway.example.edu")  # no scheme


@pytest.mark.django_db(transaction=True)
def test_a_reviewer_sees_its_institution_and_a_superuser_every_one(institutions):
    a, b = institutions["a"], institutions["b"]
    reviewer = session_cookie(staff_user("rita", institution=a.institution, role="reviewer"))
    admin_b = session_cookie(staff_user("bob", institution=b.institution, role="admin"))
    root = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def scenario():
        feeds = {"rita": communicator(reviewer), "bob": communicator(admin_b)}
        feeds["root"] = communicator(root)
        for feed in feeds.values():
            assert (await feed.connect()) == (True, None)
        assert ledger_feed.viewers == 3
        ledger_feed.publish([feed_entry(a, "req-a1"), feed_entry(b, "req-b1")])
        ledger_feed.publish([feed_entry(b, "req-b2")])
        seen = {name: await every_row(feed) for name, feed in feeds.items()}
        for feed in feeds.values():
            await feed.disconnect()
        return seen

    assert run(scenario) == {
        "rita": ["req-a1"],
        "bob": ["req-b1", "req-b2"],
        "root": ["req-a1", "req-b1", "req-b2"],
    }
    assert ledger_feed.viewers == 0 and ledger_feed.stats.sent == 6


@pytest.mark.django_db(transaction=True)
def test_the_rows_name_their_holders_in_each_viewers_language(institutions):
    """The websocket's rows are named in the language of the viewer's pages (their own choice,
    then the cookie, the browser, the institution: licensing.access.languages.page_language),
    although the consumer runs where no page activated one."""
    a = institutions["a"]
    greta = staff_user("greta", institution=a.institution, role="reviewer")
    AdminProfile.objects.filter(user=greta).update(language="de")  # her own choice
    cookies = {
        "greta": session_cookie(greta),
        "bea": session_cookie(staff_user("bea", institution=a.institution, role="reviewer")),
        "ed": session_cookie(staff_user("ed", institution=a.institution, role="reviewer")),
    }
    extra = {"bea": [(b"accept-language", b"fr, de-AT;q=0.8")], "greta": [], "ed": []}

    async def scenario():
        feeds = {}
        for name, cookie in cookies.items():
            headers = [(b"host", b"testserver"), (b"origin", b"http://testserver")]
            headers += [(b"cookie", cookie.encode()), *extra[name]]
            feeds[name] = WebsocketCommunicator(websocket_application(), PATH, headers=headers)
            assert (await feeds[name].connect()) == (True, None)
        ledger_feed.publish([feed_entry(a, "req-1", end_user_id=987654)])  # no such person
        holders = {}
        for name, feed in feeds.items():
            message = await feed.receive_json_from(timeout=2.0)
            holders[name] = [row["holder"] for row in message["rows"]]
            await feed.disconnect()
        return holders

    assert run(scenario) == {
        "greta": ["Endnutzer 987654"],
        "bea": ["Endnutzer 987654"],
        "ed": ["end user 987654"],
    }


@pytest.mark.django_db(transaction=True)
def test_what_the_browser_sends_is_ignored(institutions):
    root = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))

    async def scenario():
        feed = communicator(root)
        await feed.connect()
        await feed.send_to(text_data="not json {")
        await feed.send_to(text_data='{"type": "ledger.rows", "rows": [{"request_id": "x"}]}')
        await feed.send_to(bytes_data=b"\x00\xff")
        assert await feed.receive_nothing(timeout=0.2)
        ledger_feed.publish([feed_entry(institutions["a"], "req-1")])
        rows = await rows_of(feed)
        await feed.disconnect()
        return rows

    assert run(scenario) == ["req-1"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["logout", "deactivated", "role removed"])
def test_a_viewer_is_closed_once_it_may_no_longer_see(change, institutions, monkeypatch):
    from django.contrib.sessions.models import Session

    monkeypatch.setattr(consumers, "HEARTBEAT", 0.05)
    user = staff_user("rita", institution=institutions["a"].institution, role="reviewer")
    cookie = session_cookie(user)

    def take_away():
        if change == "logout":
            Session.objects.all().delete()
        elif change == "deactivated":
            type(user).objects.filter(pk=user.pk).update(is_active=False)
        else:
            user.gateway_profile.delete()

    async def scenario():
        feed = communicator(cookie)
        assert (await feed.connect())[0]
        await asyncio.sleep(0.15)  # heartbeats pass: still allowed
        assert await feed.receive_nothing(timeout=0.05)
        from channels.db import database_sync_to_async

        await database_sync_to_async(take_away)()
        closed = await feed.receive_output(timeout=2)
        gone = ledger_feed.viewers == 0
        await feed.disconnect()
        return closed, gone

    assert run(scenario) == ({"type": "websocket.close", "code": consumers.REFUSED}, True)


# --- the page -----------------------------------------------------------------------------


def _ledger_rows(license, count, **fields):
    Transaction.objects.bulk_create(
        Transaction(
            request_id=f"{license.name}-{i}",
            license=license,
            service="embeddings",
            requested_model="text-embedding-3-small",
            billed_model="text-embedding-3-small",
            **{
                "provider": "direct",
                "connection": "default",
                "status_code": 200,
                "credits": 10 + i,
                **fields,
            },
        )
        for i in range(count)
    )


@pytest.mark.django_db
def test_the_page_starts_with_the_latest_rows_of_the_scope(institutions):
    a, b = institutions["a"], institutions["b"]
    _ledger_rows(a, 60)
    _ledger_rows(b, 3)
    reviewer = Client()
    reviewer.force_login(staff_user("rita", institution=a.institution, role="reviewer"))
    with CaptureQueriesContext(connection) as queries:
        page = reviewer.get(LIVE_URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="live-row ') == live.PAGE_ROWS
    assert "license-a-59" in html and "license-b-" not in html
    assert 'src="/static/licensing/live.js"' in html
    assert 'data-socket-path="/ws/admin/transactions/"' in html
    assert "Your institution's requests" in html
    assert len(queries) <= 8, [q["sql"] for q in queries]  # not one per row

    root = Client()
    root.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    html = root.get(LIVE_URL).content.decode()
    assert "license-b-2" in html and "Every institution's requests" in html


@pytest.mark.django_db
def test_the_page_escapes_what_users_wrote_and_marks_refusals(institutions):
    a = institutions["a"]
    _ledger_rows(
        a,
        1,
        outcome="denied",
        status_code=403,
        error_code="policy_denied",
        error_message="model '<img src=x onerror=alert(1)>' is not allowed",
    )
    Transaction.objects.update(requested_model="<script>alert(1)</script>")
    root = Client()
    root.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    html = root.get(LIVE_URL).content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert 'class="live-row live-denied"' in html
    assert "<strong>policy_denied</strong>" in html


@pytest.mark.django_db
def test_who_may_open_the_page(institutions):
    anonymous = Client().get(LIVE_URL)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    no_role = Client()
    no_role.force_login(staff_user("no-role"))
    assert no_role.get(LIVE_URL).status_code == 403
    admin = Client()
    admin.force_login(staff_user("ada", institution=institutions["a"].institution, role="admin"))
    assert admin.get(LIVE_URL).status_code == 200
    changelist = admin.get("/admin/licensing/transaction/").content.decode()
    assert f'href="{LIVE_URL}"' in changelist

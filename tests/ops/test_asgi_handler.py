"""The gateway's ASGI handler (gateway_site/handler.py): /v1 without Django's per-request thread
and request signals, everything else Django's own."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core.signals import request_finished, request_started
from django.http import HttpResponse

from gateway_site.handler import GatewayASGIHandler, _close


def _get(path: str) -> tuple[int, bytes]:
    return asyncio.run(_get_async(path))


async def _get_async(path: str) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    answer = {"status": None, "body": b""}
    done = asyncio.Event()
    first = True

    async def receive():
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        else:
            answer["body"] += message.get("body", b"")
            if not message.get("more_body"):
                done.set()

    await GatewayASGIHandler()(scope, receive, send)
    return answer["status"], answer["body"]


@pytest.fixture
def seen(monkeypatch):
    """The request signals sent and the threads started while a request is handled."""
    events: list[str] = []

    def started(**kwargs):
        events.append("started")

    def finished(**kwargs):
        events.append("finished")

    request_started.connect(started, weak=False)
    request_finished.connect(finished, weak=False)
    start = threading.Thread.start
    test_thread = threading.get_ident()  # the loop's: other servers of the suite start their own

    def counted(thread):
        if threading.get_ident() == test_thread:
            events.append("thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    yield events
    request_started.disconnect(started)
    request_finished.disconnect(finished)


def test_v1_runs_without_a_thread_or_the_request_signals(seen):
    async def requests():
        await _get_async("/v1/models")  # a loop's first request may start its worker threads
        seen.clear()
        answers = []
        for path in ["/v1/models", "/v1/no-such-endpoint"] * 3:
            answers.append((await _get_async(path))[0])
        return answers, list(seen)  # before asyncio.run's own executor shutdown thread

    statuses, events = asyncio.run(requests())
    assert statuses == [401, 404] * 3
    assert events == []


@pytest.mark.django_db
def test_the_rest_is_djangos_own(seen):
    status, _ = _get("/admin/login/")
    assert status == 200
    assert "started" in seen and "finished" in seen and "thread" in seen


def test_the_response_is_closed_with_its_closers_and_without_the_signal(seen):
    response = HttpResponse(b"x")
    calls = []
    closers = [lambda: calls.append(1), lambda: 1 / 0, lambda: calls.append(2)]
    response._resource_closers.extend(closers)
    _close(response)
    assert response.closed and response._resource_closers == []
    assert calls == [1, 2]  # every closer ran, in order, past the one that failed
    assert seen == []

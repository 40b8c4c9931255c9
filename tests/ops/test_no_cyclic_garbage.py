"""A request's objects are freed by reference counting as soon as it is answered, not left in
reference cycles for the cyclic garbage collector (which then scans them all: at 32 connections
a 30 ms pause every second, bench/README). Checked on the live gateway of the test process."""

from __future__ import annotations

import gc

from tests.kit import drain_background_writes

# Server-side types only: the test's own httpx client has cycles of its own.
SERVER_TYPES = {
    "ASGIRequest",
    "HttpResponse",
    "StreamingHttpResponse",
    "RequestAborted",
    "AiohttpResponseStream",
    "ClientResponse",
}


def cyclic_garbage(make_requests) -> dict[str, int]:
    gc.collect()
    gc.disable()
    try:
        make_requests()
        drain_background_writes()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            name = type(obj).__name__
            if name in SERVER_TYPES:
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_answered_requests_leave_no_cycles(client, catalog, auth):
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}

    def make_requests():
        for _ in range(5):
            embeddings = {"model": "text-embedding-3-small", "input": "x"}
            assert client.post("/v1/embeddings", json=embeddings, headers=auth).status_code == 200
            assert client.post("/v1/chat/completions", json=chat, headers=auth).status_code == 200
            streamed = client.post(
                "/v1/chat/completions", json={**chat, "stream": True}, headers=auth
            )
            assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
            assert client.get("/v1/models", headers=auth).status_code == 200

    assert cyclic_garbage(make_requests) == {}

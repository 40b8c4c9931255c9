"""Where the wall time of one /v1 request goes: the gateway's ASGI application with timestamps
at each step, for the closing notes of issue 12 (bench/README, "Timeline").

    GATEWAY_TIMELINE_OUT=/tmp/timeline PYTHONPATH=bench .venv/bin/gunicorn \\
        -c python:gateway_site.gunicorn_conf --workers 1 --bind 127.0.0.1:8000 timeline:application
    # then load it (wrk at one connection, or one stream after the other)

Each worker writes `<out>-<pid>.txt` every few seconds once it has served enough requests: the
median time between consecutive marks over the requests that passed every mark (the first 50
are dropped: connection set-up, caches). Marks: `start` (the handler has the request),
`auth<`/`auth>`, `budget<`/`budget>` (the wallet read), `call<`/`call>` (the provider call; a
stream's ends when its headers are in), `ledger<`/`ledger>` (the group commit, answers only),
`view>` (the response object is made), `sent` (the answer's body, or a stream's first
event, handed to the server), `end`. Not for production: it wraps functions in place.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from contextvars import ContextVar

# isort: off
from gateway_site.asgi import application  # noqa: F401  (served; sets Django up first)
from gateway_site import handler
from inference import api, pipeline, streaming
# isort: on

_now = time.perf_counter_ns
# The request's own marks: requests overlap (the next one arrives before the last finishes),
# and the tasks a request starts (a stream's reader) inherit its context.
_marks: ContextVar[dict[str, int]] = ContextVar("timeline")
_SINK: dict[str, int] = {}  # marks made outside a request (a stream's late ledger write)
_done: list[dict[str, int]] = []
ANSWER = ["start", "auth<", "auth>", "budget<", "budget>", "call<", "call>", "ledger<"]
ANSWER += ["ledger>", "view>", "sent", "end"]
STREAM = ["start", "auth<", "auth>", "budget<", "budget>", "call<", "call>", "view>", "event"]
STREAM += ["sent"]


def _timed(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    async def timed(*args, **kwargs):
        marks = _marks.get(_SINK)
        marks[label + "<"] = _now()
        try:
            return await original(*args, **kwargs)
        finally:
            marks[label + ">"] = _now()

    setattr(owner, name, timed)


_timed(api.BearerAuth, "__call__", "auth")
_timed(pipeline, "budget_check_async", "budget")
_timed(pipeline, "_timed_call", "call")
_timed(pipeline, "transaction_record", "ledger")

_run = pipeline.run


async def _view(request, operation, body):
    try:
        return await _run(request, operation, body)
    finally:
        _marks.get(_SINK)["view>"] = _now()


pipeline.run = _view
_take = streaming._Upstream._take


def _take_marked(self, blocks):
    _marks.get(_SINK).setdefault("event", _now())
    return _take(self, blocks)


streaming._Upstream._take = _take_marked
_send_response = handler.GatewayASGIHandler.send_response


async def _send_marked(self, response, send):
    marks = _marks.get(_SINK)

    async def marked(message):
        await send(message)
        if message.get("body"):
            marks.setdefault("sent", _now())

    return await _send_response(self, response, marked)


handler.GatewayASGIHandler.send_response = _send_marked
_handle = handler.GatewayASGIHandler.handle_api


async def _handle_marked(self, scope, receive, send):
    marks = {"start": _now()}
    _marks.set(marks)
    await _handle(self, scope, receive, send)
    marks["end"] = _now()
    _done.append(marks)


handler.GatewayASGIHandler.handle_api = _handle_marked


def report(rows: list[dict[str, int]]) -> str:
    out = []
    for kind, order in (("answers", ANSWER), ("streams", STREAM)):
        complete = [r for r in rows if all(mark in r for mark in order)]
        if kind == "answers":
            complete = [r for r in complete if "event" not in r]
        if not complete:
            continue
        out.append(f"{kind}: {len(complete)} requests, median us between marks")
        for a, b in zip(order, order[1:], strict=False):
            median = statistics.median((r[b] - r[a]) / 1e3 for r in complete)
            out.append(f"  {a:>8} -> {b:<8} {median:8.1f}")
        first, last = order[0], order[-1]
        total = statistics.median((r[last] - r[first]) / 1e3 for r in complete)
        out.append(f"  {first} -> {last}: {total:.1f}")
    return "\n".join(out) + "\n"


def _writer(path: str) -> None:
    while True:
        time.sleep(3)
        if len(_done) > 100:
            with open(f"{path}-{os.getpid()}.txt", "w") as f:
                f.write(report(_done[50:]))


_out = os.environ.get("GATEWAY_TIMELINE_OUT")
if _out:
    threading.Thread(target=_writer, args=(_out,), daemon=True).start()

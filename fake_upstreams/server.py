"""The shared runner (uvicorn in a daemon thread) and the base class of every fake.

``FakeUpstream`` is a plain ASGI callable: it reads the whole request, records
it, applies any queued failure mode (fail / hang / drop), then routes to the
subclass's handler. Handlers are ordinary synchronous methods that return a
:class:`Response`; all the asynchronous work (latency, streaming, stalls,
broken connections) lives here so each fake only describes its protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import uvicorn

# The epoch of the fake that the stream being sent began in (each request is a task of its own).
_STREAM_EPOCH: contextvars.ContextVar[int] = contextvars.ContextVar("stream_epoch", default=-1)

log = logging.getLogger("fake_upstreams")

_JSON_SEPARATORS = (",", ":")


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it.

    ``path`` is percent-decoded (what routing sees); ``raw_path`` is the path as
    it was on the wire, escapes intact, which is what a SigV4 signature covers.
    ``headers`` has lower-case names; repeated headers are joined with ", ".
    ``query`` keeps the last value of a repeated parameter.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any = None
    raw_path: str = ""
    query_string: str = ""
    received_at: float = field(default_factory=time.time)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- responses


class Response:
    """A complete answer (``body``) or a server-sent-event stream (``events``).

    For streams, ``preamble`` is sent first and is not counted by the stream
    knobs (OpenRouter's keep-alive comment lives there); ``error_event(i)``
    renders the protocol's own mid-stream error for ``stream_fail_mode =
    "error_event"``; ``pauses`` maps an event's index to seconds waited before
    it (a usage event that comes late).
    """

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
        *,
        events: list[bytes] | None = None,
        preamble: bytes = b"",
        error_event: Callable[[int], bytes] | None = None,
        pauses: dict[int, float] | None = None,
    ):
        self.status = status
        self.body = body
        self.headers = list(headers or [])
        self.events = events
        self.preamble = preamble
        self.error_event = error_event
        self.pauses = pauses or {}

    @property
    def is_stream(self) -> bool:
        return self.events is not None


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=_JSON_SEPARATORS, ensure_ascii=False).encode("utf-8")


def json_response(
    obj: Any, status: int = 200, headers: list[tuple[str, str]] | None = None
) -> Response:
    return Response(status, dumps(obj), [("content-type", "application/json"), *(headers or [])])


def sse_data(obj: Any) -> bytes:
    """One unnamed SSE event (Chat Completions style)."""
    payload = obj if isinstance(obj, str) else dumps(obj).decode("utf-8")
    return f"data: {payload}\n\n".encode()


def sse_event(name: str, obj: Any) -> bytes:
    """One named SSE event (Responses API style)."""
    return f"event: {name}\ndata: {dumps(obj).decode('utf-8')}\n\n".encode()


def sse_response(
    events: list[bytes],
    *,
    headers: list[tuple[str, str]] | None = None,
    preamble: bytes = b"",
    error_event: Callable[[int], bytes] | None = None,
    pauses: dict[int, float] | None = None,
) -> Response:
    base = [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
    ]
    return Response(
        200,
        headers=[*base, *(headers or [])],
        events=events,
        preamble=preamble,
        error_event=error_event,
        pauses=pauses,
    )


class ApiError(Exception):
    """Raised by a handler to answer with an error response right away."""

    def __init__(self, response: Response):
        super().__init__(response.status)
        self.response = response


class _DropConnection(Exception):
    """Raised after the response has started, so uvicorn closes the socket mid-answer."""


class _QuietDrops(logging.Filter):
    # Intentional drops would otherwise print "Exception in ASGI application"
    # tracebacks into every test run that exercises them.
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _DropConnection)


def _install_log_filter() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDrops) for f in logger.filters):
        logger.addFilter(_QuietDrops())


@dataclass
class _Mode:
    kind: str  # "fail" | "hang" | "drop" | "hold" | "bloat"
    status: int = 500
    body: Any = None
    headers: dict[str, str] | None = None
    seconds: float = 0.0
    size: int = 0  # bloat: bytes of whitespace added to the answer


# --------------------------------------------------------------------------- base class


class FakeUpstream:
    """Base class: recording, failure modes, routing, streaming knobs.

    Subclasses set ``name``, ``base_path`` and ``ROUTES`` (``(method, regex,
    handler name)``, the regex matched against the whole decoded path),
    list handler names that need no credentials in ``PUBLIC``, declare their
    own knobs in ``KNOBS`` (name -> default; :meth:`reset` restores them) and
    implement :meth:`error`, :meth:`check_auth` and :meth:`not_found`.

    Failure modes queued with :meth:`fail_next`, :meth:`hang_next` and
    :meth:`drop_next` share one first-in-first-out queue: each request takes
    the next one, so ``fail_next(times=2); drop_next()`` fails two requests and
    drops the third.
    """

    name = "fake"
    base_path = ""
    ROUTES: list[tuple[str, str, str]] = []
    PUBLIC: frozenset[str] = frozenset()
    KNOBS: dict[str, Any] = {
        "delay": 0.0,  # seconds of latency before every answer
        "chunk_delay": 0.0,  # seconds between two streamed events
        "stream_fail_after": None,  # break a stream after this many events
        "stream_fail_mode": "drop",  # "drop" the connection, or send the protocol's "error_event"
        "stream_stall_after": None,  # go silent after this many events...
        "stream_stall_seconds": 30.0,  # ...for this long, then carry on
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._modes: deque[_Mode] = deque()
        self._closing = threading.Event()
        self._routes = [(m, re.compile(p), h) for m, p, h in self.ROUTES]
        self.origin: str | None = None
        # Streams whose client hung up before the last event (the client cancelled).
        self.streams_abandoned = 0
        # Per stream, in the order streams ended: the events sent before it ended.
        self.streams_sent: list[list[bytes]] = []
        # Bumped by clear(): a stream begun before it (a test's stalled stream still sleeping)
        # is not counted in the next test's figures when it finally ends.
        self._epoch = 0
        # Requests held by hold_next() until release(): (the fake's loop, the event they wait on).
        self._held: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._hold_when: Callable[[RecordedRequest], bool] | None = None
        self._apply_knob_defaults()

    # -- knobs -------------------------------------------------------------------------

    @classmethod
    def knob_defaults(cls) -> dict[str, Any]:
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            defaults.update(klass.__dict__.get("KNOBS", {}))
        return defaults

    def _apply_knob_defaults(self) -> None:
        for name, value in self.knob_defaults().items():
            setattr(self, name, copy.deepcopy(value))

    # -- addresses ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The URL prefix the gateway's adapter appends its paths to."""
        if self.origin is None:
            raise RuntimeError(f"{type(self).__name__} is not being served; use serve() first")
        return self.origin + self.base_path

    # -- recording ---------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def last(self) -> RecordedRequest | None:
        with self._lock:
            return self._requests[-1] if self._requests else None

    def clear(self) -> None:
        """Forget recorded requests and queued failure modes (knobs stay as set)."""
        with self._lock:
            self._requests.clear()
            self._modes.clear()
            self.streams_abandoned = 0
            self.streams_sent = []
            self._epoch += 1
        self.release()

    def reset(self) -> None:
        """:meth:`clear` and put every knob back to its default (for shared fixtures)."""
        self.clear()
        self._hold_when = None
        self._apply_knob_defaults()
        self._reset_state()

    def _reset_state(self) -> None:
        """Hook for subclasses that keep protocol state (stored responses, files)."""

    # -- failure modes -----------------------------------------------------------------

    def fail_next(
        self,
        status: int = 500,
        body: Any = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests with ``status``.

        ``body`` None means the protocol's own error shape with a plausible
        message; a dict/list is sent as JSON; str/bytes are sent as they are.
        """
        self._queue(_Mode("fail", status=status, body=body, headers=headers), times)

    def hang_next(self, seconds: float = 30.0, times: int = 1) -> None:
        """Wait ``seconds`` before answering the next ``times`` requests (then answer normally)."""
        self._queue(_Mode("hang", seconds=seconds), times)

    def hold_next(self, times: int = 1) -> None:
        """Hold the next ``times`` requests (recorded, unanswered) until :meth:`release`: an
        upstream as slow as a test needs, without a clock."""
        self._queue(_Mode("hold"), times)

    def hold_when(self, predicate: Callable[[RecordedRequest], bool] | None) -> None:
        """Hold every request ``predicate`` picks until :meth:`release` (None: stop picking);
        the others are answered as usual. Forgotten by :meth:`reset`."""
        self._hold_when = predicate

    @property
    def holding(self) -> int:
        """How many requests are held now."""
        with self._lock:
            return sum(not event.is_set() for _, event in self._held)

    def release(self) -> None:
        """Answer every held request (normally)."""
        with self._lock:
            held, self._held = self._held, []
        for loop, event in held:
            with contextlib.suppress(RuntimeError):  # the fake's loop is gone already
                loop.call_soon_threadsafe(event.set)

    def bloat_next(self, size: int, times: int = 1) -> None:
        """Answer the next ``times`` requests normally, with ``size`` bytes of whitespace after
        the JSON body (still valid JSON): an answer as large as a test needs."""
        self._queue(_Mode("bloat", size=size), times)

    def drop_next(self, times: int = 1) -> None:
        """Promise a body in the headers, then close the socket: a transport error for clients."""
        self._queue(_Mode("drop"), times)

    def _queue(self, mode: _Mode, times: int) -> None:
        with self._lock:
            self._modes.extend(copy.copy(mode) for _ in range(times))

    # -- protocol hooks (subclasses) ---------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return json_response({"error": message or "error"}, status)

    def check_auth(self, request: RecordedRequest) -> Response | None:
        return None

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, f"Not found: {request.method} {request.path}")

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        """Headers every answer carries (request ids and the like)."""
        return []

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400, "The request body is not valid JSON.")

    # -- helpers for handlers ----------------------------------------------------------

    def body_json(self, request: RecordedRequest) -> dict:
        """The request body as a JSON object, or the protocol's 400 via ApiError."""
        if not isinstance(request.json, dict):
            raise ApiError(self.invalid_json(request))
        return request.json

    def fail(self, status: int, message: str | None = None, **extra: Any) -> ApiError:
        """``raise self.fail(...)`` from a handler answers with the protocol's error."""
        return ApiError(self.error(status, message, **extra))

    # -- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; nothing here speaks websockets
        body = await self._read_body(receive)
        request = self._record(scope, body)
        with self._lock:
            mode = self._modes.popleft() if self._modes else None
        if self.delay:
            await self._sleep(self.delay)
        if mode is not None and mode.kind == "hang":
            await self._sleep(mode.seconds)
        held = self._hold_when is not None and self._hold_when(request)
        if held or (mode is not None and mode.kind == "hold"):
            event = asyncio.Event()
            with self._lock:
                self._held.append((asyncio.get_running_loop(), event))
            await event.wait()
        if mode is not None and mode.kind == "drop":
            await self._drop(send)
        if mode is not None and mode.kind == "fail":
            response = self._failure(mode)
        else:
            response = self._handle(request)
        if mode is not None and mode.kind == "bloat":
            response.body += b" " * mode.size
        response.headers.extend(self.response_headers(request))
        await self._send(send, response, receive)

    async def _read_body(self, receive: Callable) -> bytes:
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    def _record(self, scope: dict, body: bytes) -> RecordedRequest:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", []):
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        query_string = scope.get("query_string", b"").decode("latin-1")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        raw_path = scope.get("raw_path")
        request = RecordedRequest(
            method=scope["method"],
            path=scope["path"],
            query=dict(parse_qsl(query_string, keep_blank_values=True)),
            headers=headers,
            body=body,
            json=parsed,
            raw_path=raw_path.decode("latin-1") if raw_path else scope["path"],
            query_string=query_string,
        )
        with self._lock:
            self._requests.append(request)
        return request

    def _failure(self, mode: _Mode) -> Response:
        if mode.body is None:
            response = self.error(mode.status)
        elif isinstance(mode.body, dict | list):
            response = json_response(mode.body, mode.status)
        else:
            raw = mode.body.encode("utf-8") if isinstance(mode.body, str) else mode.body
            try:
                json.loads(raw)
                kind = "application/json"
            except ValueError:
                kind = "text/plain; charset=utf-8"
            response = Response(mode.status, raw, [("content-type", kind)])
        if mode.headers:
            names = {k.lower() for k in mode.headers}
            response.headers = [(k, v) for k, v in response.headers if k.lower() not in names]
            response.headers.extend(mode.headers.items())
        return response

    def _handle(self, request: RecordedRequest) -> Response:
        try:
            for method, pattern, handler_name in self._routes:
                match = pattern.fullmatch(request.path)
                if match is None or method != request.method:
                    continue
                if handler_name not in self.PUBLIC:
                    denied = self.check_auth(request)
                    if denied is not None:
                        return denied
                return getattr(self, handler_name)(request, **match.groupdict())
            return self.not_found(request)
        except ApiError as exc:
            return exc.response
        except Exception:
            # A bug in a fake should look like an upstream 500, not hang the test.
            log.exception("%s failed on %s %s", type(self).__name__, request.method, request.path)
            return self.error(500)

    async def _sleep(self, seconds: float, hung_up: asyncio.Future | None = None) -> None:
        # Sleep in slices so stop() does not wait for a 30 s hang to finish. A stream's pause
        # ends when its client hangs up: the abandoned stream is counted then, not seconds
        # later (in the next test, after its reset).
        deadline = time.monotonic() + seconds
        while not self._closing.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or (hung_up is not None and hung_up.done()):
                return
            if hung_up is None:
                await asyncio.sleep(min(left, 0.05))
            else:
                await asyncio.wait({hung_up}, timeout=min(left, 0.05))

    async def _drop(self, send: Callable) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"1024")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"', "more_body": True})
        raise _DropConnection()

    async def _send(self, send: Callable, response: Response, receive: Callable) -> None:
        headers = [
            (k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in response.headers
        ]
        if not response.is_stream:
            headers.append((b"content-length", str(len(response.body)).encode()))
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            await send({"type": "http.response.body", "body": response.body})
            return
        # Read the knobs once so a test changing them mid-stream cannot tear this one.
        fail_after, fail_mode = self.stream_fail_after, self.stream_fail_mode
        stall_after, stall_seconds = self.stream_stall_after, self.stream_stall_seconds
        chunk_delay = self.chunk_delay
        _STREAM_EPOCH.set(self._epoch)
        # The request body is read: the next message is the client's disconnect, if it comes.
        hung_up = asyncio.ensure_future(receive())
        try:
            await self._send_events(
                send,
                response,
                headers,
                hung_up,
                (fail_after, fail_mode),
                stall_after,
                stall_seconds,
                chunk_delay,
            )
        finally:
            hung_up.cancel()

    def _count_abandoned(self) -> None:
        with self._lock:
            if _STREAM_EPOCH.get() == self._epoch:
                self.streams_abandoned += 1

    async def _send_events(
        self, send, response, headers, hung_up, failure, stall_after, stall_seconds, chunk_delay
    ) -> None:
        fail_after, fail_mode = failure
        sent: list[bytes] = []
        try:
            await self._send_each(
                send,
                response,
                headers,
                hung_up,
                fail_after,
                fail_mode,
                stall_after,
                stall_seconds,
                chunk_delay,
                sent,
            )
        finally:
            with self._lock:
                if _STREAM_EPOCH.get() == self._epoch:
                    self.streams_sent.append(sent)

    async def _send_each(
        self,
        send,
        response,
        headers,
        hung_up,
        fail_after,
        fail_mode,
        stall_after,
        stall_seconds,
        chunk_delay,
        sent,
    ) -> None:
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        if response.preamble:
            await send({"type": "http.response.body", "body": response.preamble, "more_body": True})
        for index, event in enumerate(response.events or []):
            if response.pauses.get(index):
                await self._sleep(response.pauses[index], hung_up)
            if hung_up.done():
                self._count_abandoned()
                return
            if fail_after is not None and index >= fail_after:
                if fail_mode == "error_event" and response.error_event is not None:
                    await send({"type": "http.response.body", "body": response.error_event(index)})
                    return
                raise _DropConnection()
            if stall_after is not None and index == stall_after:
                await self._sleep(stall_seconds, hung_up)
            elif index and chunk_delay:
                await self._sleep(chunk_delay, hung_up)
            if hung_up.done():  # left while this event was being waited for
                self._count_abandoned()
                return
            await send({"type": "http.response.body", "body": event, "more_body": True})
            sent.append(event)
        await send({"type": "http.response.body", "body": b""})


# --------------------------------------------------------------------------- runner


class FakeServer:
    """Serves one fake with uvicorn on 127.0.0.1 in a daemon thread.

    ``port=0`` picks a free port; the socket is bound before uvicorn starts so
    the real port is known up front, and :meth:`start` returns only once the
    server accepts connections. Use it directly for a session-scoped pytest
    fixture, or through :func:`serve` as a context manager.
    """

    def __init__(
        self,
        app: FakeUpstream,
        port: int = 0,
        host: str = "127.0.0.1",
        keep_alive: float = 5,
        tls: tuple[str, str] | None = None,
    ):
        self.app = app
        self.tls = tls  # (certificate chain file, key file): served over https
        self.host = host
        self.keep_alive = keep_alive  # seconds an idle kept-alive connection stays open
        self.requested_port = port
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.origin + self.app.base_path

    def start(self, timeout: float = 10.0) -> FakeUpstream:
        if self._thread is not None:
            raise RuntimeError("already started")
        # proto=IPPROTO_TCP: asyncio only turns Nagle off (TCP_NODELAY) on sockets that say so,
        # and with Nagle on every kept-alive answer waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.requested_port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=self.keep_alive,
            ssl_certfile=self.tls[0] if self.tls else None,
            ssl_keyfile=self.tls[1] if self.tls else None,
        )
        _install_log_filter()
        self._server = uvicorn.Server(config)
        self.app._closing.clear()
        self.app.origin = self.origin
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"fake-{self.app.name}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                sock.close()
                raise RuntimeError(f"{type(self.app).__name__} did not start on {self.origin}")
            time.sleep(0.005)
        return self.app

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self.app._closing.set()  # ends hangs and stalls early
        self.app.release()
        self._server.should_exit = True
        self._thread.join(timeout=3)
        if self._thread.is_alive():
            self._server.force_exit = True  # stop waiting for clients still connected
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def serve(app: FakeUpstream, port: int = 0, keep_alive: float = 5) -> Iterator[FakeUpstream]:
    """Serve ``app`` on 127.0.0.1 for the ``with`` block and yield the app itself.

    Inside the block ``app.origin`` and ``app.base_url`` are set.
    """
    server = FakeServer(app, port, keep_alive=keep_alive)
    server.start()
    try:
        yield app
    finally:
        server.stop()

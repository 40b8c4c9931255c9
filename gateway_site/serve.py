"""uvicorn's command line, with two fixes for `--workers N > 1`.

    python -m gateway_site.serve gateway_site.asgi:application --workers 2 [uvicorn options]

1. Nagle. uvicorn binds the listener itself with proto 0; the accepted connections inherit it,
   asyncio then leaves Nagle's algorithm on, and on a kept-alive connection every answer
   (headers and body are two writes) waits ~40 ms for the client's delayed ACK
   (Kludex/uvicorn#3149). The listener is made with proto=IPPROTO_TCP, the fix proposed upstream.
2. Balance. All workers accept from one shared listening socket, and under load the worker that
   wakes first takes nearly every connection (measured: 32 of 32 kept-alive connections on one
   of two workers, the other idle). Each worker instead listens on a socket of its own bound
   with SO_REUSEPORT to the same address, and the kernel spreads new connections across them.
   The parent's socket is bound (reserving the address) but never listens, so it gets none.
Drop these two once uvicorn does both.

3. Trusted proxies. uvicorn takes the client's address and scheme from `X-Forwarded-For` and
   `X-Forwarded-Proto` of requests from 127.0.0.1 and ::1 unless told otherwise, so any process
   on the host could pose as any client (the admin's login throttling keys on that address).
   Here nobody is trusted unless FORWARDED_ALLOW_IPS (or --forwarded-allow-ips) names the proxy.

It also owns the workers' metrics directory (gateway_site.metrics_setup): emptied at start,
inherited by the workers, and each worker that ends (restarted, killed) is marked dead, so its
in-flight requests stop counting.
"""

import os
import socket

import uvicorn
from uvicorn.config import Config
from uvicorn.supervisors import multiprocess

from core.config import exit_on_bad_environment
from gateway_site import metrics_setup

_bind_socket = Config.bind_socket
_startup = uvicorn.Server.startup
_join = multiprocess.Process.join
_INET = (socket.AF_INET, socket.AF_INET6)


def _listener(family: int, address) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


def bind_socket(self: Config) -> socket.socket:
    """In the supervisor: the shared address, reserved with SO_REUSEPORT and IPPROTO_TCP."""
    sock = _bind_socket(self)
    if sock.family not in _INET:
        return sock
    address = sock.getsockname()
    sock.close()
    return _listener(sock.family, address)


async def startup(self: uvicorn.Server, sockets=None) -> None:
    """In each worker: listen on a socket of its own instead of the shared one."""
    if sockets:
        own = []
        for sock in sockets:
            if sock.family in _INET and sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
                own.append(_listener(sock.family, sock.getsockname()))
                sock.close()
            else:
                own.append(sock)
        sockets = own
    await _startup(self, sockets=sockets)


def join(self: multiprocess.Process) -> None:
    """In the supervisor: a worker has ended (every path that retires one joins it)."""
    _join(self)
    metrics_setup.mark_dead(self.pid)


# At import: a spawned worker imports this module (as __mp_main__) and needs the patch too.
# (mypy: assigning to a method is the point of a monkeypatch.)
Config.bind_socket = bind_socket  # type: ignore[method-assign]
uvicorn.Server.startup = startup  # type: ignore[method-assign]
multiprocess.Process.join = join  # type: ignore[method-assign]


def main() -> None:
    exit_on_bad_environment("gateway_site.serve")
    # Empty: no address is trusted (uvicorn reads the variable when --forwarded-allow-ips is not
    # given; the workers inherit it).
    os.environ.setdefault("FORWARDED_ALLOW_IPS", "")
    metrics_setup.own_multiproc_dir()
    uvicorn.main()


if __name__ == "__main__":
    main()

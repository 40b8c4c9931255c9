"""uvicorn's command line, with the listening socket marked IPPROTO_TCP.

    python -m gateway_site.serve gateway_site.asgi:application --workers 2 [uvicorn options]

With `--workers N > 1` uvicorn binds the listener itself with proto 0; the accepted
connections inherit it, asyncio then leaves Nagle's algorithm on, and on a kept-alive
connection every answer (headers and body are two writes) waits ~40 ms for the client's
delayed ACK (Kludex/uvicorn#3149). Re-wrapping the bound socket with proto=IPPROTO_TCP is
the fix proposed upstream; drop this module once uvicorn ships it.
"""

import socket

import uvicorn
from uvicorn.config import Config

_bind_socket = Config.bind_socket


def bind_socket(self: Config) -> socket.socket:
    sock = _bind_socket(self)
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.proto:
        return sock
    return socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())


def main() -> None:
    Config.bind_socket = bind_socket
    uvicorn.main()


if __name__ == "__main__":
    main()

"""The fake OpenAI upstream with its `chunk_delay` knob set (the streamed chat case).

    python -m bench.upstream --port P --api-key K [--chunk-delay 0.02]

`python -m fake_upstreams openai` serves the same app (`OpenAIFake`) but has no flag for the
stream knobs of `FakeUpstream`. This sets `chunk_delay` (seconds between two SSE events) and
serves the app with uvicorn on a listener created with proto=IPPROTO_TCP, as `FakeServer` does,
so that asyncio turns TCP_NODELAY on for the accepted connections (no delayed-ACK stalls).
"""

import argparse
import socket

import uvicorn

from fake_upstreams.openai import OpenAIFake


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key")
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="seconds between events")
    args = parser.parse_args()
    fake = OpenAIFake(api_key=args.api_key)
    fake.chunk_delay = args.chunk_delay
    fake.origin = f"http://127.0.0.1:{args.port}"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    config = uvicorn.Config(fake, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()

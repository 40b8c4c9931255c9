"""Serve one fake upstream in the foreground, for a local demo of the gateway.

    python -m fake_upstreams openai --port 9100 --api-key sk-local
    python -m fake_upstreams bedrock --port 9102 --access-key AK --secret-key SK --region us-east-1

Stops on Ctrl-C. These are simulators with made-up output, not providers.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from .anthropic import AnthropicFake
from .bedrock import BedrockFake
from .brave import BraveFake
from .gemini import GeminiFake
from .openai import OpenAIFake
from .openalex import OpenAlexFake
from .openrouter import OpenRouterFake
from .server import FakeServer, FakeUpstream

LABELS = {
    "openai": "OpenAI API",
    "openrouter": "OpenRouter API",
    "bedrock": "AWS Bedrock Runtime",
    "gemini": "Gemini API",
    "brave": "Brave Search API",
    "openalex": "OpenAlex works API",
    "anthropic": "Anthropic Messages API",
}


def build(args: argparse.Namespace) -> FakeUpstream:
    if args.provider == "openai":
        return OpenAIFake(api_key=args.api_key)
    if args.provider == "openrouter":
        return OpenRouterFake(api_key=args.api_key)
    if args.provider == "gemini":
        return GeminiFake(api_key=args.api_key)
    if args.provider == "brave":
        return BraveFake(api_key=args.api_key)
    if args.provider == "openalex":
        return OpenAlexFake(api_key=args.api_key)
    if args.provider == "anthropic":
        return AnthropicFake(api_key=args.api_key)
    if (args.access_key is None) != (args.secret_key is None):
        raise SystemExit("bedrock: give both --access-key and --secret-key, or neither")
    return BedrockFake(access_key=args.access_key, secret_key=args.secret_key, region=args.region)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fake_upstreams",
        description="Serve a local simulator of an AI provider's API (not a real provider).",
    )
    parser.add_argument("provider", choices=sorted(LABELS))
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)"
    )
    parser.add_argument(
        "--api-key",
        help="accepted key (openai, openrouter, gemini, brave, openalex); default: accept any",
    )
    parser.add_argument(
        "--access-key", help="bedrock: AWS access key id requests must be signed with"
    )
    parser.add_argument("--secret-key", help="bedrock: AWS secret key requests must be signed with")
    parser.add_argument(
        "--region", default="us-east-1", help="bedrock: region of the signature scope"
    )
    args = parser.parse_args(argv)

    # Python leaves SIGINT ignored when the shell that started it ignored it (a background job
    # of a non-interactive shell, as CI scripts start things): Ctrl-C / SIGINT must still stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = FakeServer(build(args), port=args.port)
    server.start()
    print(
        f"fake_upstreams: LOCAL DEVELOPMENT SIMULATOR of the {LABELS[args.provider]} "
        f"(not a real provider, made-up output) at {server.base_url} - Ctrl-C to stop",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

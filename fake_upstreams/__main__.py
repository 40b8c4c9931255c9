"""Serve one fake upstream in the foreground, for a local demo of the gateway.

    python -m fake_upstreams openai --port 9100 --api-key sk-local
    python -m fake_upstreams bedrock --port 9102 --access-key AK --secret-key SK --region us-east-1
    python -m fake_upstreams oidc --port 9103 --gateway-url http://127.0.0.1:8000
    python -m fake_upstreams lti --port 9104 --gateway-url http://127.0.0.1:8000

Stops on Ctrl-C. These are simulators with made-up output, not providers; `oidc` (the
development identity provider: a sign-in page listing the demo people) and `lti` (the LMS
simulator: a demo course that launches them into the gateway) sign in anyone who reaches them
as anyone they list, and are for trying the gateway on one computer only (README, "What you
see"; docs/decisions/dev-tools.md).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable

from . import demo
from .anthropic import AnthropicFake
from .bedrock import BedrockFake
from .brave import BraveFake
from .gemini import GeminiFake
from .lti import DevLms
from .oidc import DevIdentityProvider
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
# The development tools of sign-in: what each one's line says it is.
SIGN_IN_LABELS = {
    "oidc": f"{demo.BANNER}; anyone who opens it signs in as anyone it lists",
    "lti": f"{demo.LMS_BANNER}; anyone who opens it launches as anyone it lists",
}


def _bedrock(args: argparse.Namespace) -> FakeUpstream:
    if (args.access_key is None) != (args.secret_key is None):
        raise SystemExit("bedrock: give both --access-key and --secret-key, or neither")
    return BedrockFake(access_key=args.access_key, secret_key=args.secret_key, region=args.region)


BUILDERS: dict[str, Callable[[argparse.Namespace], FakeUpstream]] = {
    "openai": lambda args: OpenAIFake(api_key=args.api_key),
    "openrouter": lambda args: OpenRouterFake(api_key=args.api_key),
    "gemini": lambda args: GeminiFake(api_key=args.api_key),
    "brave": lambda args: BraveFake(api_key=args.api_key),
    "openalex": lambda args: OpenAlexFake(api_key=args.api_key),
    "anthropic": lambda args: AnthropicFake(api_key=args.api_key),
    "bedrock": _bedrock,
    "oidc": lambda args: DevIdentityProvider(
        args.client_id or demo.IDP_CLIENT_ID,
        args.client_secret or demo.IDP_CLIENT_SECRET,
        gateway_url=args.gateway_url,
    ),
    "lti": lambda args: DevLms(
        args.client_id or demo.LMS_CLIENT_ID,
        args.deployment_id,
        tool_url=args.gateway_url,
    ),
}


def build(args: argparse.Namespace) -> FakeUpstream:
    return BUILDERS[args.provider](args)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fake_upstreams",
        description="Serve a local simulator of an AI provider's API (not a real provider), "
        "or a development tool of sign-in: `oidc` (an identity provider with a page listing "
        "the demo people) or `lti` (an LMS with a demo course). Not for real use.",
    )
    parser.add_argument("provider", choices=sorted(BUILDERS))
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free port)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this computer only)",
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
    parser.add_argument(
        "--gateway-url",
        help="oidc, lti: the gateway's address as the browser reaches it, e.g. "
        "http://127.0.0.1:8000 (oidc: codes go back to it only; lti: the tool the course opens)",
    )
    parser.add_argument(
        "--client-id",
        help=f"oidc: the gateway's client id (default {demo.IDP_CLIENT_ID}); lti: the id the "
        f"LMS gave the gateway (default {demo.LMS_CLIENT_ID})",
    )
    parser.add_argument(
        "--client-secret", help=f"oidc: the client's secret (default {demo.IDP_CLIENT_SECRET})"
    )
    parser.add_argument(
        "--deployment-id",
        default=demo.LMS_DEPLOYMENT_ID,
        help=f"lti: the deployment id (default {demo.LMS_DEPLOYMENT_ID})",
    )
    return parser


def banner(provider: str, server: FakeServer) -> str:
    if provider in SIGN_IN_LABELS:
        return f"fake_upstreams: {SIGN_IN_LABELS[provider]}: {server.origin}/ - Ctrl-C to stop"
    return (
        f"fake_upstreams: LOCAL DEVELOPMENT SIMULATOR of the {LABELS[provider]} "
        f"(not a real provider, made-up output) at {server.app.base_url} - Ctrl-C to stop"
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Python leaves SIGINT ignored when the shell that started it ignored it (a background job
    # of a non-interactive shell, as CI scripts start things): Ctrl-C / SIGINT must still stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = FakeServer(build(args), port=args.port, host=args.host)
    server.start()
    if args.host in ("0.0.0.0", "::"):
        # Listening on every address (in a container): named by the address this computer's
        # browser and the gateway beside it both reach, as an issuer must be one URL.
        server.app.origin = f"http://127.0.0.1:{server.port}"
    print(banner(args.provider, server), flush=True)
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

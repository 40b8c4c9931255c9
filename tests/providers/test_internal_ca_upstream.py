"""Issue 35 item 2, for provider connections: a campus's own model server (vLLM, Ollama)
behind the institution's CA is reached once `GATEWAY_EXTRA_CA_CERTS` names that CA, on both of
the pool's transports (aiohttp, and httpx for Bedrock's signed calls), and refused as
unreachable without it (a provider failure: the spec's 503, never a 500)."""

from __future__ import annotations

import asyncio

import pytest

from fake_upstreams.compatible import OpenAICompatibleFake
from fake_upstreams.server import FakeServer
from inference.providers.pool import Upstream, UpstreamUnreachable
from tests.tls import make_ca_and_server


@pytest.fixture(scope="module")
def campus_ca(tmp_path_factory):
    return make_ca_and_server(tmp_path_factory.mktemp("campus-ca"))


@pytest.fixture(scope="module")
def https_server(campus_ca):
    _, chain, key = campus_ca
    server = FakeServer(OpenAICompatibleFake(), tls=(str(chain), str(key)))
    server.start()
    yield server.app
    server.stop()


def _models(upstream: Upstream, base_url: str):
    async def call():
        try:
            return await upstream.request(
                "GET", f"{base_url}/models", content=b"", headers={}, params=None, max_bytes=1 << 20
            )
        finally:
            await upstream.aclose()

    return asyncio.run(call())


@pytest.mark.parametrize("aiohttp_transport", [True, False], ids=["aiohttp", "httpx"])
def test_a_campus_server_on_an_internal_ca(https_server, campus_ca, settings, aiohttp_transport):
    assert https_server.base_url.startswith("https://")
    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": None}
    with pytest.raises(UpstreamUnreachable):
        _models(Upstream(timeout=5, aiohttp_transport=aiohttp_transport), https_server.base_url)

    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": str(campus_ca[0])}
    answer = _models(
        Upstream(timeout=5, aiohttp_transport=aiohttp_transport), https_server.base_url
    )
    assert answer.status_code == 200
    assert answer.json()["data"]

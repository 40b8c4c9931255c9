"""The OpenAI Codex CLI (`codex exec`, pinned in tests/clients/codex/package-lock.json) against
the live gateway and the OpenAI simulator, with the config.toml of docs/clients.md: a custom
model provider on the gateway's /v1 with `wire_api = "responses"`.

Codex sends what a generic client does not (issue 35): `prompt_cache_key`, `client_metadata`,
`reasoning: {"summary": "auto"}`, `include`, `store: false`, a `namespace` tool and the hosted
`web_search` tool, streamed. The run must exit 0, print the provider's answer, and leave one
charged ledger row whose credits are the catalog's price of the provider's usage (its tokens and
its hosted web search).

The CLI is installed once per lock (tests/npm.py: `npm ci` into var/cache/codex-<digest>);
without npm, or with the registry unreachable, the test is skipped, saying so. It starts a
process of its own: `slow`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from catalog.models import Model
from inference.billing import credits_for
from inference.providers.usage import Usage
from tests.client_helpers import assert_charged, provider_calls
from tests.npm import npm_installed

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PACKAGE = Path(__file__).resolve().parent / "codex"
MODEL = "gpt-4o-mini"
ANSWER = "Hello from the gateway's fake upstream."


def _install() -> Path:
    """The pinned CLI (tests/npm.py: `npm ci`'d once per lock into var/cache/)."""
    return npm_installed(PACKAGE, "codex") / "node_modules" / ".bin" / "codex"


@pytest.fixture(scope="session")
def codex_binary() -> Path:
    return _install()


def codex_home(path: Path, base_url: str) -> Path:
    """The config.toml of docs/clients.md, with update checks and analytics off."""
    path.mkdir()
    (path / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "gateway"\n'
        "check_for_update_on_startup = false\n"
        "\n"
        "[model_providers.gateway]\n"
        'name = "Inference gateway"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "GATEWAY_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "\n"
        "[analytics]\n"
        "enabled = false\n"
    )
    return path


def test_codex_exec_through_the_gateway(codex_binary, gateway, catalog, api_key, tmp_path):
    fake = catalog["direct"]
    fake.reply_text = ANSWER
    fake.call_tools = False  # one plain answer ends the run (no command to execute)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CODEX_HOME": str(codex_home(tmp_path / "codex", gateway.url)),
        "GATEWAY_KEY": api_key,
        "NO_COLOR": "1",
    }
    run = subprocess.run(
        [str(codex_binary), "exec", "--skip-git-repo-check", "Say hello"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert ANSWER in run.stdout, (run.stdout, run.stderr[-4000:])

    (sent,) = provider_calls(fake, "/v1/responses")
    # What Codex sends, forwarded to the direct provider as it came.
    assert sent["stream"] is True and sent["store"] is False
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["prompt_cache_key"] and isinstance(sent["client_metadata"], dict)
    kinds = {tool["type"] for tool in sent["tools"]}
    assert {"function", "namespace", "web_search"} <= kinds, kinds

    (row,) = assert_charged(1, "responses", model=MODEL)
    # The provider made one hosted web search (the simulator's default): billed at its fee.
    usage = Usage(
        prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens, units=row.units
    )
    assert row.prompt_tokens > 0 and row.completion_tokens > 0 and row.units == 1
    assert row.credits == credits_for(Model.objects.get(model_id=MODEL).cost, usage)

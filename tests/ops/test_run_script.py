"""scripts/run.sh: a busy port stops it before anything is touched (the development identity
provider's and LMS simulator's too); a bad or unreachable database is one line and a non-zero
exit; the curl lines it prints answer, pasted as they are; it says once, not in every process,
that secrets are encrypted with the development key; the demo key it prints is the one kept in
its key file (mode 0600). The demo school's development sign-in: tests/ops/test_setup_demo.py
and, in a browser, tests/portal/test_browser_first_run.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from catalog.models import Connection
from licensing.models import License

from ..ports import run_script_ports
from ..processes import database_url, free_port

pytestmark = [pytest.mark.slow, pytest.mark.both_databases]  # run.sh and the README server

ROOT = Path(__file__).resolve().parents[2]


def run_script(**env_extra: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"OPENAI_API_KEY", "OPENROUTER_API_KEY", "DATABASE_URL"}
    }
    env.update(env_extra)
    return subprocess.run(
        ["bash", "scripts/run.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


# The port taken: PORT, SIMULATOR_PORT, or the development identity provider's or LMS
# simulator's (SIMULATOR_PORT + 3, + 4).
BUSY = {"PORT": 0, "SIMULATOR_PORT": 0, "identity provider": 3, "LMS simulator": 4}


@pytest.mark.parametrize("busy", sorted(BUSY))
def test_a_busy_port_stops_it_before_the_database_is_touched(catalog, busy):
    direct = Connection.objects.get(provider__slug="direct", name="default")
    ports = run_script_ports()
    taken = int(ports.get(busy, ports["SIMULATOR_PORT"])) + BUSY[busy]
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        result = run_script(DATABASE_URL=database_url(), **ports)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"run.sh: port {taken} on 127.0.0.1 is not free (Address already in use); "
        "stop what uses it or set PORT / SIMULATOR_PORT"
    ]
    assert result.stdout == ""
    after = Connection.objects.get(pk=direct.pk)
    # The running instance's connection is untouched: same URL, same token, same timestamp.
    assert (after.base_url, after.api_key.token, after.updated_at) == (
        direct.base_url,
        direct.api_key.token,
        direct.updated_at,
    )
    assert not License.objects.filter(name="demo").exists()


@pytest.mark.parametrize(
    "url, expected",
    [
        ("postgres://nobody@127.0.0.1:{port}/gateway", "the database is unreachable"),
        ("nosuchdb://somewhere/gateway", "DATABASE_URL is not a usable database URL"),
    ],
)
def test_a_bad_database_url_is_one_line_and_a_non_zero_exit(url, expected):
    url = url.format(port=free_port())
    result = run_script(DATABASE_URL=url, **run_script_ports())
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("manage.py: ") and expected in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_manage_py_commands_report_a_bad_database_in_one_line():
    env = {**os.environ, "DATABASE_URL": f"postgres://nobody@127.0.0.1:{free_port()}/x"}
    result = subprocess.run(
        [sys.executable, "manage.py", "create_api_key", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "the database is unreachable" in result.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_printed_curl_lines_answer_as_the_readme_says(readme_server):
    # The session's README server (tests/conftest.py): run.sh started as the README starts it,
    # its output kept from the first line (one start for this test and the browser modules).
    run = readme_server
    lines = [line.strip() for line in run.output if line.strip().startswith("curl ")]
    answers = []
    for line in lines:
        # Pasted into a shell as printed: the quoting has to hold.
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    printed = "".join(run.output)  # the gateway's worker has decrypted secrets by now
    # The key printed is the one kept for the next run, readable by its owner only.
    key_file = Path(run.env["DEMO_KEY_FILE"])
    key = re.search(r"Demo API key \(kept in (\S+); [^)]*\): (sk-svc-\S+)", printed)
    assert key and key.group(1) == str(key_file), printed
    assert key_file.read_text().strip() == key.group(2)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    _check_the_encryption_note(printed)
    bodies = [json.loads(_data_argument(line)) for line in lines]
    paths = [shlex.split(line)[2].split("/", 3)[3] for line in lines]
    assert paths == [
        "v1/embeddings",
        "v1/web-search",
        "v1/chat/completions",
        "v1/chat/completions",
    ]
    embeddings, search, tool_call, structured = answers

    # Readable: 8 numbers, not the model's 1,536.
    assert bodies[0]["dimensions"] == 8 and len(embeddings["data"][0]["embedding"]) == 8
    assert len(search["results"]) == 3

    # The simulator calls the tool, with arguments valid against its schema.
    tool = bodies[2]["tools"][0]["function"]
    choice = tool_call["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == tool["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, tool["parameters"])
    assert arguments == {"city": "Paris"}

    # ...and answers the JSON schema with a document valid against it.
    schema = bodies[3]["response_format"]["json_schema"]["schema"]
    choice = structured["choices"][0]
    assert choice["finish_reason"] == "stop"
    document = json.loads(choice["message"]["content"])
    jsonschema.validate(document, schema)
    assert document == {
        "name": "Echo: Alice and Bob go to the science fair on Friday.",
        "day": "sample day",
        "participants": ["sample participants"],
    }


def _check_the_encryption_note(printed: str) -> None:
    """Without GATEWAY_ENCRYPTION_KEYS: one line says which key encrypts secrets; no process
    warns (each one did: the setup, and every gateway worker at its first secret)."""
    if os.environ.get("GATEWAY_ENCRYPTION_KEYS"):
        return
    assert "GATEWAY_ENCRYPTION_KEYS is not set: secrets are encrypted" not in printed
    notes = [line for line in printed.splitlines() if line.startswith("Secrets:")]
    assert notes == [
        "Secrets:  encrypted at rest with the development key in var/encryption.key "
        "(GATEWAY_ENCRYPTION_KEYS is not set; set it in production, docs/deployment.md)"
    ]


def _data_argument(line: str) -> str:
    words = shlex.split(line)
    return words[words.index("-d") + 1]

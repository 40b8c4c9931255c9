"""scripts/run.sh: a busy port stops it before anything is touched; a bad or unreachable
database is one line and a non-zero exit; the curl lines it prints answer, pasted as they are."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from catalog.models import Connection
from licensing.models import License

from ..ports import run_script_ports
from ..processes import database_url, free_port

pytestmark = pytest.mark.slow  # run.sh and the README server

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


@pytest.mark.parametrize("busy", ["PORT", "SIMULATOR_PORT"])
def test_a_busy_port_stops_it_before_the_database_is_touched(catalog, busy):
    direct = Connection.objects.get(provider__slug="direct", name="default")
    ports = run_script_ports()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(ports[busy])))
        listener.listen()
        result = run_script(DATABASE_URL=database_url(), **ports)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"run.sh: port {ports[busy]} on 127.0.0.1 is not free (Address already in use); "
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
def test_the_printed_curl_lines_answer_as_the_readme_says():
    from tests.browser import running_server

    with running_server() as run:
        lines = [line.strip() for line in run.output if line.strip().startswith("curl ")]
        answers = []
        for line in lines:
            # Pasted into a shell as printed: the quoting has to hold.
            done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            answers.append(json.loads(done.stdout))
    bodies = [json.loads(_data_argument(line)) for line in lines]
    paths = [shlex.split(line)[2].split("/", 3)[3] for line in lines]
    assert paths == [
        "v1/embeddings",
        "v1/web-search",
        "v1/chat/completions",
        "v1/chat/completions",
    ]
    embeddings, search, tool_call, structured = answers

    assert len(embeddings["data"][0]["embedding"]) == 1536
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


def _data_argument(line: str) -> str:
    words = shlex.split(line)
    return words[words.index("-d") + 1]

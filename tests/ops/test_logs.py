"""Log lines as a worker process writes them: every line one JSON object with the request id
(LOG_FORMAT=json, the default outside development), or readable text (LOG_FORMAT=text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.processes import ROOT, Worker, database_url

SMALL = "text-embedding-3-small"


def run_worker(tmp_path, log_format: str, make_requests) -> list[str]:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DEBUG")},
        "DATABASE_URL": database_url(),
        "LOG_FORMAT": log_format,
        "GATEWAY_INVALIDATION_FILE": str(tmp_path / "generation"),
    }
    log = tmp_path / "worker.log"
    worker = Worker(env, log)
    try:
        worker.wait_ready()
        make_requests(worker)
    finally:
        worker.stop()
    return [line for line in log.read_text().splitlines() if line.strip()]


def failing_call(catalog, key: str, seen: dict):
    def make_requests(worker):
        catalog["direct"].fail_next(429)
        response = worker.http.post(
            "/v1/embeddings",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": SMALL, "input": "x", "encoding_format": "float"},
        )
        assert response.status_code == 503
        seen["request_id"] = response.headers["X-Request-Id"]

    return make_requests


def test_every_line_is_json_with_the_request_id(transactional_db, tmp_path, catalog, api_key):
    seen: dict = {}
    lines = run_worker(tmp_path, "json", failing_call(catalog, api_key, seen))
    records = [json.loads(line) for line in lines]  # every line parses
    for record in records:
        assert {"time", "level", "logger", "message", "request_id"} <= set(record), record
    assert any(r["logger"].startswith("uvicorn") for r in records)  # the server's own lines
    # The worker runs with --no-access-log: the gateway's access line is the only one.
    assert not any(r["logger"] == "uvicorn.access" for r in records)
    mine = [r for r in records if r["request_id"] == seen["request_id"]]
    warning = next(r for r in mine if "answered 429" in r["message"])
    assert (warning["level"], warning["logger"]) == ("WARNING", "gateway")
    access = next(r for r in mine if r["logger"] == "gateway.access")
    assert (access["method"], access["path"], access["status"]) == ("POST", "/v1/embeddings", 503)
    assert access["error_code"] == "provider_unavailable" and access["latency_ms"] >= 0
    assert api_key not in "\n".join(lines)


def test_text_lines_for_development(transactional_db, tmp_path, catalog, api_key):
    seen: dict = {}
    lines = run_worker(tmp_path, "text", failing_call(catalog, api_key, seen))
    mine = [line for line in lines if f"[{seen['request_id']}]" in line]
    assert any("WARNING gateway " in line and "answered 429" in line for line in mine)
    assert any(
        "INFO gateway.access " in line and "POST /v1/embeddings 503" in line for line in mine
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(mine[0])


def test_an_unknown_log_format_stops_at_start(tmp_path):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "manage.py: LOG_FORMAT: not one of 'json' or 'text': 'xml'" in done.stderr

"""The environment is read once into core.config.Config: typed values, defaults, and at start one
line per bad value, all of them together, and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from core.config import Config, ConfigError, load
from tests.processes import ROOT

BAD = {
    "GATEWAY_UPSTREAM_POOL_WAIT": "abc",
    "GATEWAY_FETCH_MAX_BYTES": "5MB",
    "DEBUG": "maybe",
    "GATEWAY_PG_POOL_SIZE": "0",
    "GATEWAY_OUTBOUND_ALLOW": "10.0.0.0/8,10.1.0.0/33",
    "GATEWAY_FETCH_ALLOWED_PORTS": "80,http",
    "LOG_FORMAT": "xml",
}
LINES = [
    "DEBUG: not true or false (also 1/0, yes/no, on/off): 'maybe'",
    "LOG_FORMAT: not one of 'json' or 'text': 'xml'",
    "GATEWAY_UPSTREAM_POOL_WAIT: not a number: 'abc'",
    "GATEWAY_PG_POOL_SIZE: must be at least 1: '0'",
    "GATEWAY_FETCH_ALLOWED_PORTS: not an integer: 'http'",
    "GATEWAY_FETCH_MAX_BYTES: not an integer: '5MB'",
    "GATEWAY_OUTBOUND_ALLOW: not a CIDR network: '10.1.0.0/33'",
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in Config.model_fields}
    return {**env, **extra}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_manage_py_reports_every_bad_value_in_one_line_each_and_exits_non_zero():
    done = run([sys.executable, "manage.py", "check"], clean_env(**BAD))
    assert done.returncode == 2
    assert sorted(done.stderr.splitlines()) == sorted(f"manage.py: {line}" for line in LINES)
    assert done.stdout == ""


def test_the_server_entry_point_reports_them_the_same_way():
    done = run([sys.executable, "-c", "import gateway_site.asgi"], clean_env(**BAD))
    assert done.returncode == 2
    assert sorted(done.stderr.splitlines()) == sorted(
        f"gateway_site.asgi: {line}" for line in LINES
    )


def test_gunicorn_s_config_reports_them_before_it_starts_a_worker():
    done = run(
        [sys.executable, "-c", "import gateway_site.gunicorn_conf"],
        clean_env(GATEWAY_WORKERS="two"),
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["gunicorn: GATEWAY_WORKERS: not an integer: 'two'"]


def test_a_good_environment_gives_typed_values(monkeypatch):
    for name in Config.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_UPSTREAM_POOL_WAIT", "2.5")
    monkeypatch.setenv("GATEWAY_FETCH_ALLOWED_PORTS", "80, 8080")
    monkeypatch.setenv("ALLOWED_HOSTS", "a.example, b.example,")
    monkeypatch.setenv("SECURE_SSL_REDIRECT", "on")
    monkeypatch.setenv("GATEWAY_METRICS", "off")
    monkeypatch.setenv("GATEWAY_ACCESS_LOG_LEVEL", "warning")
    monkeypatch.setenv("REDIS_URL", "")  # set but empty: the default, as before
    monkeypatch.setenv("GATEWAY_GC_THRESHOLD", "default")
    config = load()
    assert config.GATEWAY_UPSTREAM_POOL_WAIT == 2.5
    assert config.GATEWAY_FETCH_ALLOWED_PORTS == frozenset({80, 8080})
    assert config.ALLOWED_HOSTS == ["a.example", "b.example"]
    assert config.SECURE_SSL_REDIRECT is True and config.GATEWAY_METRICS is False
    assert config.GATEWAY_ACCESS_LOG_LEVEL == "WARNING"
    assert config.REDIS_URL is None and config.gc_thresholds is None
    assert config.log_format == "json" and config.pg_prepare_threshold == 2
    gateway = config.gateway()
    assert gateway["UPSTREAM_POOL_WAIT"] == 2.5 and gateway["FETCH_ALLOWED_PORTS"] == {80, 8080}


def test_a_bad_value_is_a_config_error_listing_each(monkeypatch):
    monkeypatch.setenv("GATEWAY_CACHE_TTL", "soon")
    monkeypatch.setenv("GATEWAY_UPSTREAM_LICENSE_SHARE", "2")
    with pytest.raises(ConfigError) as caught:
        load()
    assert caught.value.lines == [
        "GATEWAY_CACHE_TTL: not a number: 'soon'",
        "GATEWAY_UPSTREAM_LICENSE_SHARE: must be at most 1: '2'",
    ]


def test_settings_gateway_keeps_its_keys_and_value_types():
    """The request path and the tests read settings.GATEWAY as a plain dict (a copy of the
    defaults here: the suite runs without GATEWAY_* variables)."""
    gateway = settings.GATEWAY
    assert type(gateway) is dict
    expected = {
        "CACHE_TTL": float,
        "UPSTREAM_CONNECT_TIMEOUT": float,
        "UPSTREAM_TIMEOUT": float,
        "UPSTREAM_MAX_CONNECTIONS": int,
        "UPSTREAM_KEEPALIVE": float,
        "UPSTREAM_POOL_WAIT": float,
        "UPSTREAM_LICENSE_SHARE": float,
        "ANSWER_MAX_BYTES": dict,
        "LEDGER_SPOOL_DIR": str,
        "LEDGER_SPOOL_MIN_FREE_BYTES": int,
        "LEDGER_SPOOL_PROBE_SECONDS": float,
        "FETCH_ALLOW_PRIVATE": str,
        "FETCH_ALLOWED_PORTS": frozenset,
        "FETCH_TIMEOUT": float,
        "FETCH_MAX_BYTES": int,
        "FETCH_MAX_TOTAL_BYTES": int,
        "FETCH_MAX_PDF_PAGES": int,
        "STREAM_USAGE_GRACE": float,
        "FAILOVER_ATTEMPTS": int,
        "BUDGET_RESERVATION_SECONDS": float,
        "BUDGET_LEASE_SECONDS": float,
        "FAILOVER_BUDGET": float,
        "CIRCUIT_FAILURES": int,
        "CIRCUIT_COOLDOWN": float,
        "CURRENCY": str,
        "CREDITS_PER_CURRENCY_UNIT": int,
        "OUTBOUND_ALLOW": str,
        "OUTBOUND_ALLOWED_PORTS": frozenset,
        "EXTRA_CA_CERTS": type(None),  # unset here; a file's path (str) when set
    }
    assert {key: type(value) for key, value in gateway.items()} == expected
    assert sorted(gateway["ANSWER_MAX_BYTES"]) == sorted(
        ["embeddings", "images", "chat", "stream", "event", "default"]
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1e400", "not a finite number"),
        ("inf", "not a finite number"),
        ("-inf", "not a finite number"),
        ("nan", "not a finite number"),
        ("31622401", "must be at most 31622400"),
        ("-1", "must be at least 0"),
    ],
)
def test_every_duration_is_finite_and_at_most_a_year(monkeypatch, value, problem):
    # 1e400 used to read as infinity and fail every held request with a 500 (a timedelta, and
    # a lease's end in milliseconds, overflowed).
    durations = [
        name
        for name, field in Config.model_fields.items()
        if field.annotation is float
        and any(getattr(m, "le", None) for m in field.metadata)
        and name != "GATEWAY_UPSTREAM_LICENSE_SHARE"
    ]
    assert "GATEWAY_BUDGET_LEASE_SECONDS" in durations and len(durations) >= 10
    for name in durations:
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load()
    assert caught.value.lines == [f"{name}: {problem}: {value!r}" for name in durations]


def test_every_whole_number_is_bounded(monkeypatch):
    # 2**64 passed `ge` alone and would have reached a bigint column, a C int or a timedelta.
    whole = [
        name
        for name, field in Config.model_fields.items()
        if field.annotation in (int, int | None) and name != "EMAIL_PORT"
    ]
    assert {"GATEWAY_CREDITS_PER_CURRENCY_UNIT", "GATEWAY_MAX_BODY_BYTES"} <= set(whole)
    assert len(whole) >= 20
    huge = str(2**64)
    for name in whole:
        monkeypatch.setenv(name, huge)
    with pytest.raises(ConfigError) as caught:
        load()
    assert len(caught.value.lines) == len(whole)
    for name, line in zip(whole, caught.value.lines, strict=True):
        assert line.startswith(f"{name}: must be at most ") and line.endswith(f": {huge!r}")
    bounds = {line.split("at most ")[1].split(":")[0] for line in caught.value.lines}
    assert bounds == {"2147483647", "9223372036854775807", "1024", "36500"}


def test_a_year_is_accepted(monkeypatch):
    monkeypatch.setenv("GATEWAY_BUDGET_RESERVATION_SECONDS", "31622400")
    monkeypatch.setenv("GATEWAY_BUDGET_LEASE_SECONDS", "31622400")
    config = load()
    assert config.GATEWAY_BUDGET_RESERVATION_SECONDS == 31622400.0
    assert config.gateway()["BUDGET_LEASE_SECONDS"] == 31622400.0

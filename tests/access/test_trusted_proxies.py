"""Trusted proxies are explicit: the shipped server command (gunicorn with
`gateway_site.gunicorn_conf`: the Dockerfile's and scripts/run.sh's) believes `X-Forwarded-For`
from nobody unless FORWARDED_ALLOW_IPS names the proxy. The admin's login throttling
(django-axes, one username from one address) keys on the address the server reports: a local
process sending a new `X-Forwarded-For` with each wrong password must still be locked out."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model

from tests.kit import wait_for_health
from tests.processes import database_url, free_port

pytestmark = pytest.mark.slow  # gateway processes behind proxy settings

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/admin/login/?next=/admin/"
ATTEMPTS = 10  # the fifth failure locks: four 200s and six 429s, or ten addresses once each


def command(server: str, port: int) -> list[str]:
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    return [gunicorn, "-c", "python:gateway_site.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
            "gateway_site.asgi:application"]  # fmt: skip


@contextmanager
def server(kind: str, tmp_path: Path, trusted: str | None):
    """The server as an operator runs it, on the test database; FORWARDED_ALLOW_IPS set to
    `trusted`, or unset."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "FORWARDED_ALLOW_IPS"}}
    env.update(DATABASE_URL=database_url(), GATEWAY_WORKERS="1", LOG_FORMAT="text")
    env.update(GATEWAY_ACCESS_LOG_LEVEL="WARNING")
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / f"metrics-{kind}-{trusted}")
    if trusted is not None:
        env["FORWARDED_ALLOW_IPS"] = trusted
    log = tmp_path / f"{kind}-{trusted}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command(kind, port), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc, log)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def wrong_passwords(base: str) -> list[int]:
    """ATTEMPTS wrong passwords for `root` from 127.0.0.1, each claiming another client."""
    statuses = []
    with httpx.Client(base_url=base, timeout=10) as browser:
        form = browser.get(LOGIN).text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
        for n in range(ATTEMPTS):
            response = browser.post(
                LOGIN,
                data={"username": "root", "password": f"wrong-{n}", "csrfmiddlewaretoken": token},
                headers={"X-Forwarded-For": f"198.51.100.{n + 1}"},
            )
            statuses.append(response.status_code)
    return statuses


@pytest.mark.parametrize("kind", ["gunicorn"])
def test_forwarded_for_is_believed_only_from_a_named_proxy(kind, transactional_db, tmp_path):
    get_user_model().objects.create_superuser("root", "root@example.test", "right-password")

    # FORWARDED_ALLOW_IPS unset: the X-Forwarded-For values are ignored, every attempt is
    # 127.0.0.1's, and the fifth failure locks root from there (GATEWAY_ADMIN_LOGIN_FAILURES).
    with server(kind, tmp_path, trusted=None) as base:
        statuses = wrong_passwords(base)
    assert statuses == [200] * 4 + [429] * (ATTEMPTS - 4)
    (attempt,) = AccessAttempt.objects.all()
    assert attempt.ip_address == "127.0.0.1" and attempt.failures_since_start == ATTEMPTS

    # The proxy named: each request's client is its X-Forwarded-For, and no pair reaches the
    # limit (one failure per address); what axes recorded is those addresses.
    AccessAttempt.objects.all().delete()
    with server(kind, tmp_path, trusted="127.0.0.1") as base:
        statuses = wrong_passwords(base)
    assert statuses == [200] * ATTEMPTS
    recorded = dict(AccessAttempt.objects.values_list("ip_address", "failures_since_start"))
    assert recorded == {f"198.51.100.{n + 1}": 1 for n in range(ATTEMPTS)}


def test_run_sh_trusts_no_proxy_unless_told():
    """scripts/run.sh serves with gunicorn, whose own default trusts loopback: it exports
    FORWARDED_ALLOW_IPS, empty when unset, before starting it."""
    script = (ROOT / "scripts" / "run.sh").read_text()
    export = 'export FORWARDED_ALLOW_IPS="${FORWARDED_ALLOW_IPS-}"'
    assert export in script
    assert script.index(export) < script.index("gunicorn -c python:gateway_site.gunicorn_conf")
    for value, expected in ((None, ""), ("10.0.0.5", "10.0.0.5")):
        env = {k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"}
        if value is not None:
            env["FORWARDED_ALLOW_IPS"] = value
        shown = subprocess.run(
            ["bash", "-c", f'{export}; printf "%s" "$FORWARDED_ALLOW_IPS"'],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert shown.stdout == expected

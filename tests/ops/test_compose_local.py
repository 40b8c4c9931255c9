"""docker-compose.yml's first try, the `local` profile: plain http, its own SQLite database in a
volume, scripts/run.sh in the image with the development tools published on the host's
loopback only; and production's variables refused by its one-shot `migrate`, not by compose's
`${NAME:?}` (compose reads every service's variables before it picks the ones to run, so that
would refuse the first try too). No container runtime runs here (docs/deployment.md,
"Containers"): the file is checked as YAML, and the local service's command is run in a plain
shell with its environment, on free ports."""

from __future__ import annotations

import html
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from fake_upstreams import demo
from tests.browser import running_server

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def local() -> dict:
    return compose()["services"]["local"]


def test_the_local_profile_is_plain_http_on_this_computer_only():
    service = local()
    assert service["profiles"] == ["local"]
    assert service["build"] == "." and service["command"] == ["bash", "scripts/run.sh"]
    env = service["environment"]
    # Nothing of production's TLS: no forced https, no secure-only cookies, no HSTS.
    assert not [name for name in env if name.startswith(("SECURE_", "SESSION_", "CSRF_"))]
    assert "<<" not in service and "x-gateway" not in str(service)
    # The embedded default, in the volume that keeps it.
    assert env["DATABASE_URL"] == "sqlite:////app/var/db.sqlite3"
    assert "local-data:/app/var" in service["volumes"]
    assert "local-data" in compose()["volumes"]
    # The gateway and the two tools a browser opens, on the host's loopback only.
    sim = int(env["SIMULATOR_PORT"])
    published = {p.split(":", 1)[0] for p in service["ports"]}
    assert published == {"127.0.0.1"}
    assert [p.split(":", 1)[1] for p in service["ports"]] == [
        f"{env['PORT']}:{env['PORT']}",
        f"{sim + 3}:{sim + 3}",
        f"{sim + 4}:{sim + 4}",
    ]
    assert env["HOST"] == env["DEV_TOOLS_HOST"] == "0.0.0.0"
    assert env["NO_VENV"] == "1"


def test_no_variable_of_the_file_is_required_at_parse_time():
    values = yaml.safe_dump(compose())  # every value of the file, its comments left out
    assert "${" in values and not re.search(r"\$\{\w+:?\?", values)
    # The production services stay as they were: no profile, `docker compose up -d`.
    services = compose()["services"]
    assert all("profiles" not in services[n] for n in ("db", "redis", "migrate", "gateway"))


def _migrate_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    """`migrate`'s command as its container's shell runs it (compose's `$$` is a `$`), up to
    the check: what follows it is replaced by an echo."""
    script = compose()["services"]["migrate"]["command"][-1].replace("$$", "$")
    check, rest = script.split(" && python manage.py migrate", 1)
    assert "manage.py load_catalog" in rest
    return subprocess.run(
        ["sh", "-c", check + " && echo checked"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


REQUIRED = ("SECRET_KEY", "GATEWAY_ENCRYPTION_KEYS", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS")
REQUIRED += ("FORWARDED_ALLOW_IPS",)


def test_migrate_names_each_production_variable_missing_and_goes_no_further():
    done = _migrate_check({"SECRET_KEY": "s", "ALLOWED_HOSTS": "", "CSRF_TRUSTED_ORIGINS": "x"})
    assert done.returncode != 0 and "checked" not in done.stdout
    assert done.stderr.splitlines() == [
        f"set {name} in .env (docker-compose.yml's header)"
        for name in ("GATEWAY_ENCRYPTION_KEYS", "ALLOWED_HOSTS", "FORWARDED_ALLOW_IPS")
    ]
    every = _migrate_check({name: "set" for name in REQUIRED})
    assert (every.returncode, every.stdout, every.stderr) == (0, "checked\n", "")
    # The anchor gives migrate every one of them (from .env).
    env = compose()["services"]["migrate"]["environment"]
    assert set(REQUIRED) <= set(env)


@pytest.mark.slow
def test_the_local_service_command_serves_the_first_run():
    """The local service's command and environment, in a plain shell (the container's /app is
    this checkout; its python the virtualenv's, on PATH as the image's is)."""
    env = dict(local()["environment"])
    env.pop("DATABASE_URL")  # a database of its own (running_server's)
    env.pop("PORT"), env.pop("SIMULATOR_PORT")  # free ports
    venv_bin = str(Path(os.sys.executable).parent)
    env["PATH"] = f"{venv_bin}:{os.environ['PATH']}"
    with running_server(**env) as run:
        assert httpx.get(run.url + "/v1/health").status_code == 200
        # The tools listen on every address of the container and call themselves 127.0.0.1:
        # one URL for the browser (through the published port) and the gateway beside them.
        page = httpx.get(run.idp_url + "/")
        assert page.status_code == 200 and demo.BANNER in page.text
        discovery = httpx.get(run.idp_url + "/.well-known/openid-configuration").json()
        assert discovery["issuer"] == run.idp_url
        assert httpx.get(run.lms_url + "/").status_code == 200
        login = httpx.get(run.url + "/portal/login/")
        assert f"Sign in with {demo.INSTITUTION}" in login.text
        button = re.search(r'href="(/sso/\d+/login/[^"]*)"', login.text)
        assert button, login.text
        started = httpx.get(run.url + html.unescape(button.group(1)))
        assert started.status_code == 302
        assert started.headers["location"].startswith(run.idp_url + "/authorize?")
        printed = "".join(run.output)
    assert "Installing the pinned dependencies" not in printed  # NO_VENV: no .venv made
    # Addresses a person can open: the host's loopback, where the ports are published.
    assert f"Inference gateway on http://127.0.0.1:{run.port}" in printed
    assert f"As a student: http://127.0.0.1:{run.port}/portal/" in printed

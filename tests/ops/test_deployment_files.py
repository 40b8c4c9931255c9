"""The deployment files stay true: Dockerfile, docker-compose.yml, .dockerignore, the gunicorn
configuration and docs/deployment.md name only modules, commands and variables that exist, the
compose environment passes `check --deploy`, and the Dockerfile's command serves the gateway
(health, the live feed's websocket, the proxy's headers, JSON log lines). No container runtime
runs here: these are the checks that can be made without one."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tomllib
from importlib import import_module, util
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import get_commands
from django.urls import resolve
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from licensing.console.consumers import PATH as LIVE_FEED
from tests.kit import wait_for_health
from tests.live_helpers import session_cookie
from tests.processes import database_url, free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "deployment.md"
# Variables of other programs, named in the guide or the compose file but not the gateway's.
FOREIGN = {
    "POSTGRES_PASSWORD",  # the postgres image's
    "POSTGRES_USER",
    "POSTGRES_DB",
    "GUNICORN_CMD_ARGS",  # gunicorn's own
    "CONN_MAX_AGE",  # a Django setting, not a variable
    "SO_REUSEPORT",  # socket options
    "TCP_NODELAY",
    "IPPROTO_TCP",
    "NEW_KEY",  # a shell variable of the key-rotation example (Secrets at rest)
}


def table_variables() -> set[str]:
    """Every variable the configuration table (docs/configuration.md) names (a row may name
    several)."""
    table = (ROOT / "docs" / "configuration.md").read_text()
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line))
    return names


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def instructions(name: str) -> list[str]:
    return [args for instruction, args in dockerfile() if instruction == name]


def cmd() -> list[str]:
    (args,) = instructions("CMD")
    return json.loads(args)


# --- Dockerfile ----------------------------------------------------------------------------------


def test_the_dockerfile_installs_the_locked_server_without_dev_extras():
    assert instructions("FROM") == ["python:3.11-slim"]
    installs = [run for run in instructions("RUN") if "install" in run]
    # Debian's xmlsec1 for SAML (pysaml2 calls it) and DejaVu for the privacy pack's PDF,
    # then the locked Python packages only.
    assert installs[0].startswith(
        "apt-get update && apt-get install -y --no-install-recommends xmlsec1 "
    )
    assert "fonts-dejavu-core" in installs[0]
    assert installs[1:] == ["bash scripts/install_locked.sh constraints-server.txt python"]
    assert not any("pip install" in run for run in instructions("RUN"))
    server = {name for name, _ in lock_pins("constraints-server.txt")}
    assert {"gunicorn", "uvicorn-worker", "granian"} <= server
    for dev_only in ("pytest", "playwright", "ruff", "schemathesis", "openai-agents"):
        assert dev_only not in server, dev_only
    user = instructions("USER")
    assert user and user[-1] not in {"root", "0"}
    assert instructions("EXPOSE") == ["8000"]


# --- the locks ------------------------------------------------------------------------------------

LOCKS = ("constraints.txt", "constraints-server.txt")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def joined(text: str) -> list[str]:
    """Requirement lines, each on one line (continuations joined, comments dropped)."""
    lines = [line.split("#", 1)[0].strip() for line in re.sub(r"\\\n", " ", text).splitlines()]
    return [line for line in lines if line]


def lock_pins(lock: str) -> list[tuple[str, str]]:
    pins = []
    for entry in joined((ROOT / lock).read_text()):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", entry)
        assert match, f"{lock}: not an exact pin: {entry[:80]}"
        pins.append((normalized(match.group(1)), match.group(2)))
    return pins


def pyproject_pins(*groups: str) -> dict[str, str]:
    """name -> version of every requirement of the base ("base") and of the extras named."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = []
    for group in groups:
        if group == "base":
            requirements += project["dependencies"]
        else:
            requirements += project["optional-dependencies"][group]
    pins = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^;\s]+)\s*(;.*)?", requirement)
        assert match, f"pyproject.toml: not an exact pin: {requirement}"
        pins[normalized(match.group(1))] = match.group(3)
    return pins


@pytest.mark.parametrize("lock", LOCKS)
def test_every_package_of_the_lock_is_pinned_with_its_hashes(lock):
    """pip's --require-hashes refuses a lock whose entry has no hash; this says which one, and
    that no entry is a range, a URL, an editable or an option that opens another index."""
    entries = joined((ROOT / lock).read_text())
    assert len(entries) > 50
    for entry in entries:
        assert HASH.search(entry), f"{lock}: no sha256 for {entry[:60]}"
        assert not re.search(r"(^|\s)(-e|--editable|-i|--index-url|--extra-index-url|-f)\b", entry)
        requirement = entry.split(";")[0]  # a marker may compare with != or <
        assert "://" not in entry and not re.search(r"[<>~!]=|===", requirement), entry[:80]
        rest = HASH.sub("", requirement).split()
        assert len(rest) == 1 and "==" in rest[0], entry[:80]
    names = [name for name, _ in lock_pins(lock)]
    assert len(names) == len(set(names)), "a package twice"


def test_every_pin_of_pyproject_is_in_the_locks_at_its_version():
    """Every extra (dev, server, clients, vendors) is in constraints.txt, the base and `server` in
    constraints-server.txt, at the version pyproject.toml pins; the two locks agree on every
    package they share; pip and the build backend (setuptools) are locked too."""
    full = dict(lock_pins("constraints.txt"))
    server = dict(lock_pins("constraints-server.txt"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = {"dev", "server", "clients", "vendors"}
    assert set(pyproject["project"]["optional-dependencies"]) == extras
    for name, version in pyproject_pins("base", *extras).items():
        assert full.get(name) == version, (name, version, full.get(name))
    for name, version in pyproject_pins("base", "server").items():
        assert server.get(name) == version, (name, version, server.get(name))
    assert {name: full.get(name) for name in server} == server
    build = pyproject["build-system"]["requires"]
    assert [normalized(re.split(r"[<>=!~ ]", r)[0]) for r in build] == ["setuptools"]
    for lock in (full, server):
        assert "setuptools" in lock and "pip" in lock


def test_every_install_goes_through_the_hash_checked_lock():
    """scripts/_env.sh (so run.sh, test.sh and CI) and the Dockerfile install only through
    scripts/install_locked.sh: uv from its own hash-pinned lock, then the lock with
    --require-hashes and --no-deps, then the project without resolving or building anything that
    is not in the lock, then `pip check`."""
    env = (ROOT / "scripts" / "_env.sh").read_text()
    assert 'bash scripts/install_locked.sh constraints.txt "$VENV/bin/python"' in env
    install = (ROOT / "scripts" / "install_locked.sh").read_text()
    commands = [
        line.strip()
        for line in install.splitlines()
        if line.startswith(('"$PY" -m pip', '"$UV" pip'))
    ]
    assert commands == [
        '"$PY" -m pip install --quiet --require-hashes --no-deps -r scripts/lock-tools.txt',
        '"$UV" pip install --python "$PY" --require-hashes --no-deps --compile-bytecode -r "$LOCK"',
        '"$UV" pip install --python "$PY" --no-deps --no-build-isolation -e .',
        '"$PY" -m pip check',
    ]
    # Nothing else installs a package (.ci/run goes through scripts/test.sh).
    for path in ("scripts/run.sh", "scripts/test.sh", "scripts/_env.sh", ".ci/run"):
        assert "pip install" not in (ROOT / path).read_text(), path
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_installer_is_one_hash_pinned_uv():
    """The interpreter's own pip (23.2.1 in a new Python 3.11.7 venv) installs only uv, and only
    the file locked in scripts/lock-tools.txt."""
    entries = joined((ROOT / "scripts" / "lock-tools.txt").read_text())
    assert len(entries) == 1 and entries[0].startswith("uv=="), entries
    assert HASH.search(entries[0])
    assert "--no-deps" in (ROOT / "scripts" / "install_locked.sh").read_text()


def test_uvicorn_serves_with_httptools_and_uvloop():
    """Both are pinned dependencies, so uvicorn's `auto` (uvicorn-worker's defaults, under
    gunicorn) serves with its C HTTP parser and libuv's loop (bench/README: 0.3 ms less per
    request at one connection than h11 on asyncio's loop)."""
    import uvicorn
    import uvloop
    from uvicorn.loops.auto import auto_loop_factory
    from uvicorn_worker import UvicornWorker

    config = uvicorn.Config(app="gateway_site.asgi:application", http="auto", loop="auto")
    assert UvicornWorker.CONFIG_KWARGS == {"loop": "auto", "http": "auto"}
    assert config.http == "auto" and config.loop == "auto"
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"
    loop = auto_loop_factory()()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_dockerfile_command_and_health_check_name_what_exists():
    words = cmd()
    assert words[:2] == ["gunicorn", "-c"]
    conf = import_module(words[2].removeprefix("python:"))
    module, _, cls = conf.worker_class.rpartition(".")
    assert getattr(import_module(module), cls)
    app_module, _, app = words[-1].partition(":")
    # Found, not imported: importing the ASGI module sets the process's metrics mode.
    assert util.find_spec(app_module) and app == "application"
    assert "application =" in (ROOT / (app_module.replace(".", "/") + ".py")).read_text()
    (health,) = instructions("HEALTHCHECK")
    url = re.search(r"http://127\.0\.0\.1:8000(/[^'\"]*)", health).group(1)
    assert url == "/v1/health" and resolve(url)
    for run in instructions("RUN"):
        for command in re.findall(r"manage\.py (\w+)", run):
            assert command in get_commands(), command


def test_the_dockerignore_keeps_secrets_and_state_out_and_what_runs_in():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for must in (".git", ".venv", "var", ".env", "db.sqlite3*"):
        assert must in patterns, must

    def ignored(path: str) -> bool:
        return any(
            fnmatch.fnmatch(path, p.removeprefix("**/")) or path.startswith(p.rstrip("/") + "/")
            for p in patterns
        )

    from licensing.console.admin.licenses import POLICY_DOCS  # served by the admin at run time

    kept = ["manage.py", "pyproject.toml", "constraints.txt", str(POLICY_DOCS.relative_to(ROOT))]
    kept += ["gateway_site/gunicorn_conf.py", "licensing/models/__init__.py", "catalog/defaults.py"]
    for path in kept:
        assert (ROOT / path).exists() and not ignored(path), path


# --- docker-compose.yml ---------------------------------------------------------------------------


def test_the_compose_file_is_the_documented_setup():
    services = compose()["services"]
    assert set(services) == {"db", "redis", "migrate", "gateway", "retention", "local"}
    # Production is the services without a profile (`docker compose up -d`); the first try's
    # `local` is tests/ops/test_compose_local.py's.
    assert [n for n in services if "profiles" in services[n]] == ["local"]
    db, redis, migrate, gateway = (services[n] for n in ("db", "redis", "migrate", "gateway"))
    assert db["image"] == "postgres:15" and "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    assert redis["image"] == "redis:7"
    assert "manage.py migrate" in migrate["command"][-1]
    assert "manage.py load_catalog" in migrate["command"][-1]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert gateway["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert gateway["build"] == "." and migrate["build"] == "."
    spool = gateway["environment"]["GATEWAY_LEDGER_SPOOL_DIR"]
    assert f"ledger-spool:{spool}" in gateway["volumes"]
    assert gateway["environment"]["REDIS_URL"].startswith("redis://redis:")
    assert "@db:5432/" in gateway["environment"]["DATABASE_URL"]
    for command in re.findall(r"manage\.py (\w+)", migrate["command"][-1]):
        assert command in get_commands(), command
    # The daily retention job (licensing.privacy.retention), after the schema is there.
    retention = services["retention"]
    assert "python manage.py apply_retention;" in retention["command"][-1]
    assert "sleep 86400" in retention["command"][-1]
    assert retention["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_compose_secrets_come_from_the_operators_env_file():
    # `${NAME:-}`, never a value here; a missing one is refused by `migrate` (compose reads the
    # local service's variables too, so `${NAME:?}` would refuse the first try:
    # tests/ops/test_compose_local.py).
    env = compose()["services"]["gateway"]["environment"]
    for name in ("SECRET_KEY", "GATEWAY_ENCRYPTION_KEYS"):
        assert env[name] == "${" + name + ":-}", env[name]
    assert "${POSTGRES_PASSWORD:-}" in env["DATABASE_URL"]
    assert not (ROOT / ".env").exists() or ".env" in (ROOT / ".gitignore").read_text()


def test_compose_variables_are_in_the_configuration_table():
    documented = table_variables()
    for name in ("gateway", "migrate"):
        for variable in compose()["services"][name]["environment"]:
            assert variable in documented, variable


def test_check_deploy_is_clean_with_the_compose_environment(tmp_path):
    values = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "GATEWAY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "POSTGRES_PASSWORD": "pw",
        "ALLOWED_HOSTS": "gateway.example.edu",
        "CSRF_TRUSTED_ORIGINS": "https://gateway.example.edu",
    }

    def interpolate(value: str) -> str:
        return re.sub(
            r"\$\{(\w+)(?::[-?]([^}]*))?\}",
            lambda m: values.get(m.group(1), m.group(2) or ""),
            str(value),
        )

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "GATEWAY_"))}
    env.update(
        {k: interpolate(v) for k, v in compose()["services"]["gateway"]["environment"].items()}
    )
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'check.sqlite3'}"  # checks need no server
    env["GATEWAY_LEDGER_SPOOL_DIR"] = str(tmp_path / "spool")
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr


# --- docs/deployment.md ---------------------------------------------------------------------------


def test_every_variable_in_the_guide_is_in_the_configuration_table():
    named = set(re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", GUIDE.read_text()))
    missing = named - table_variables() - FOREIGN
    assert not missing, f"docs/deployment.md names variables the table does not: {missing}"


def test_every_command_in_the_guide_exists():
    text = GUIDE.read_text()
    commands = set(re.findall(r"manage\.py (\w+)", text))
    assert commands >= {"migrate", "load_catalog", "collectstatic", "replay_ledger_spool"}
    assert commands <= set(get_commands()), commands - set(get_commands())
    modules = re.findall(r"python:([a-z_][\w.]*)", text)
    modules += re.findall(r"python3? -m ([a-z_][\w.]*)", text)
    assert "gateway_site.gunicorn_conf" in modules
    for module in modules:
        assert util.find_spec(module), module


def test_the_readme_links_the_guide():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("(docs/deployment.md)") >= 2  # the top and Production


def test_server_side_cursors_can_be_turned_off_for_pgbouncer():
    code = "from django.conf import settings; print(settings.DATABASES['default']"
    code += "['DISABLE_SERVER_SIDE_CURSORS'])"
    for value, expected in (("off", "True"), ("on", "False"), (None, "False")):
        env = {k: v for k, v in os.environ.items() if k != "GATEWAY_PG_SERVER_SIDE_CURSORS"}
        if value:
            env["GATEWAY_PG_SERVER_SIDE_CURSORS"] = value
        result = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.stdout.strip().splitlines()[-1] == expected, (value, result.stderr)


# --- the Dockerfile's command, run here ---------------------------------------------------------


@pytest.mark.slow
def test_the_dockerfile_command_serves_the_gateway(transactional_db, tmp_path):
    """gunicorn with gateway_site.gunicorn_conf, as the image runs it (on a free port, with the
    test database): health, the live feed's websocket, the proxy's headers, JSON lines."""
    port = free_port()
    words = [w.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for w in cmd()]
    cookie = session_cookie(get_user_model().objects.create_superuser("root", password="pw"))
    env = {**os.environ, "DATABASE_URL": database_url(), "GATEWAY_WORKERS": "2"}
    env.update(LOG_FORMAT="json", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.pop("REDIS_URL", None)
    env.pop("FORWARDED_ALLOW_IPS", None)
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            words, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc, log)
        # Loopback may scrape; FORWARDED_ALLOW_IPS unset, no proxy is trusted, so a claimed
        # client changes nothing (tests/access/test_trusted_proxies.py: the other way round).
        assert httpx.get(f"{base}/metrics").status_code == 200
        forwarded = httpx.get(f"{base}/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
        assert forwarded.status_code == 200
        ws = "ws" + base.removeprefix("http") + LIVE_FEED
        with connect(ws, additional_headers={"Cookie": cookie}, origin=base, open_timeout=10):
            pass  # accepted: the consumer checked the admin session
        with pytest.raises(InvalidStatus) as refused:
            with connect(ws, origin=base, open_timeout=10):
                pass
        assert refused.value.response.status_code == 403
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line JSON, gunicorn's own included
    assert sum("Booting worker" in r["message"] for r in records) == 2
    assert {"gunicorn.error", "uvicorn.error", "gateway.access"} <= {r["logger"] for r in records}
    assert proc.returncode == 0

"""Production settings: the production environment of docs/deployment.md passes `check --deploy`
without a warning, a missing SECRET_KEY or encryption key is an error, HTTPS and cookie settings
come from the environment, and admin logins are throttled (django-axes) while /v1 pays nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.core.checks import run_checks
from django.test import Client, override_settings

from tests.processes import Worker, database_url

pytestmark = pytest.mark.both_databases

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- production-env: tested by tests/ops/test_deploy_settings.py -->"


def production_block() -> str:
    guide = (ROOT / "docs" / "deployment.md").read_text()
    match = re.search(re.escape(MARKER) + r"\s*```sh\n(.*?)```", guide, re.S)
    assert match, "docs/deployment.md lost its production environment block"
    return match.group(1)


def _block_env() -> dict[str, str]:
    """The environment the guide's block makes (exported, as `set -a` does), run in bash in the
    project: its `python manage.py generate_encryption_key` is a whole Django start (~3 s of
    CPU), so the block runs once a module (`production_env`) and each command after it gets
    what it exported, as it would have in the same shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "GATEWAY_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    script = f"set -euo pipefail\nset -a\n{production_block()}\nset +a\nenv -0\n"
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return dict(item.split("=", 1) for item in result.stdout.split("\0") if "=" in item)


_made: dict[str, dict[str, str]] = {}


def production_env() -> dict[str, str]:
    """A copy of the guide's environment (the block ran once; see `_block_env`)."""
    if "env" not in _made:
        _made["env"] = _block_env()
    return dict(_made["env"])


def shell(command: str, *, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `command` in the guide's environment less `drop` (as `unset` after the block)."""
    env = {k: v for k, v in production_env().items() if k not in drop}
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{command}\n"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_documented_production_env():
    result = shell("python manage.py check --deploy")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "missing, code", [("SECRET_KEY", "gateway.E001"), ("GATEWAY_ENCRYPTION_KEYS", "gateway.E002")]
)
def test_a_missing_secret_in_production_is_an_error(missing, code):
    # The secrets' check is tagged `security`: --tag runs it (and the other security checks) but
    # not drf-spectacular's schema generation and the URL checks, which import every API module
    # (~4 s of CPU of the ~7 s a whole `check --deploy` takes). The whole run, with every tag,
    # is test_check_deploy_is_clean_with_the_documented_production_env's.
    result = shell("python manage.py check --deploy --tag security", drop=(missing,))
    assert result.returncode != 0
    assert code in result.stderr and f"{missing} is not set" in result.stderr


def test_the_settings_come_from_the_environment():
    code = (
        "from django.conf import settings as s; print(repr((s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, "
        "s.SECURE_PROXY_SSL_HEADER, s.CSRF_TRUSTED_ORIGINS, s.ALLOWED_HOSTS)))"
    )
    result = shell(f'python manage.py shell -c "{code}"')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == repr(
        (
            True,
            True,
            True,
            31536000,
            ("HTTP_X_FORWARDED_PROTO", "https"),
            ["https://gateway.example.edu"],
            ["gateway.example.edu"],
        )
    )


def test_admin_middleware_must_stay_in_the_admin_stack():
    admin = [m for m in __import__("django.conf").conf.settings.ADMIN_MIDDLEWARE]
    without = [m for m in admin if "csrf" not in m]
    with override_settings(ADMIN_MIDDLEWARE=without):
        errors = [e for e in run_checks() if e.id == "gateway.E004"]
    assert len(errors) == 1 and "CsrfViewMiddleware" in errors[0].msg


def test_production_mode_redirects_the_admin_to_https_but_not_the_api(transactional_db, tmp_path):
    env = production_env()
    env.update(DATABASE_URL=database_url(), GATEWAY_ACCESS_LOG_LEVEL="WARNING")
    env.pop("REDIS_URL")
    worker = Worker(env, tmp_path / "worker.log")
    try:
        host = {"Host": "gateway.example.edu"}
        worker.wait_ready()  # /v1/health over plain http: the API is not redirected
        plain = worker.http.get("/admin/login/", headers=host)
        assert plain.status_code == 301
        assert plain.headers["location"] == "https://gateway.example.edu/admin/login/"
        # Through the TLS proxy (uvicorn trusts X-Forwarded-Proto from 127.0.0.1).
        proxied = worker.http.get("/admin/login/", headers={**host, "X-Forwarded-Proto": "https"})
        assert proxied.status_code == 200
        assert proxied.headers["strict-transport-security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        cookie = proxied.headers["set-cookie"]
        assert "csrftoken=" in cookie and "Secure" in cookie
    finally:
        worker.stop()


# --- admin login throttling -------------------------------------------------------------------


def test_admin_logins_are_throttled_and_the_api_is_not(client, api_key, django_user_model):
    django_user_model.objects.create_superuser("root", "root@example.test", "right-password")
    browser = Client()
    login = "/admin/login/?next=/admin/"
    for _ in range(4):
        response = browser.post(login, {"username": "root", "password": "wrong"})
        assert response.status_code == 200  # the form again, with its error
    # The fifth failure locks the pair (GATEWAY_ADMIN_LOGIN_FAILURES=5)...
    assert browser.post(login, {"username": "root", "password": "x"}).status_code == 429
    response = browser.post(login, {"username": "root", "password": "right-password"})
    assert response.status_code == 429  # locked out, even with the right password
    assert "_auth_user_id" not in browser.session
    assert AccessAttempt.objects.get(username="root").failures_since_start == 6  # 5 + locked

    # /v1 never goes through axes: failed credentials leave no attempt, and a valid key from
    # the same address still works while the admin login is locked.
    for _ in range(10):
        bad = client.get("/v1/models", headers={"Authorization": "Bearer sk-svc-wrong"})
        assert bad.status_code == 401
    assert AccessAttempt.objects.count() == 1
    ok = client.get("/v1/models", headers={"Authorization": f"Bearer {api_key}"})
    assert ok.status_code == 200

    another = Client()  # the same user from the same address is locked; reset by an operator
    assert another.post(login, {"username": "root", "password": "right-password"}).status_code == (
        429
    )
    AccessAttempt.objects.all().delete()  # `manage.py axes_reset` does this
    response = another.post(login, {"username": "root", "password": "right-password"})
    assert response.status_code == 302

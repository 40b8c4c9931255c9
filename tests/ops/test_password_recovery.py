"""docs/admin-guide.md's "Recovering a lost password", command by command, as an operator types
them: `manage.py` in a process of its own on a throwaway database (the test database), the
prompts answered through a terminal (Django's password prompts want one), then the new password
signs in through the admin's login page. Also the platform admin's "Reset password" for an
institution admin, and a login lock lifted."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.models import AdminProfile, Institution
from tests.processes import ROOT, database_url

DOC = (ROOT / "docs" / "admin-guide.md").read_text()


def manage(*args: str, answers: tuple[str, ...] = (), env: dict | None = None) -> str:
    """`python manage.py ARGS` on the test database, in a terminal of its own (Django's password
    prompts want one): each prompt (a line ending in ": ") gets the next of `answers`, as a
    person types it after seeing it (getpass discards what was typed before the prompt)."""
    primary, secondary = pty.openpty()
    environment = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DATABASE_URL": database_url(),
        **(env or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        start_new_session=True,  # no controlling terminal: getpass reads the one given
    )
    os.close(secondary)
    try:
        output = _converse(proc, primary, list(answers))
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=10) == 0, output
    return output


def _converse(proc, terminal: int, answers: list[str]) -> str:
    output, unanswered = "", ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(terminal, 4096).decode(errors="replace")
            except OSError:  # the other end closed: the command exited
                return output
            output += chunk
            unanswered += chunk
        if answers and unanswered.rstrip(" ").endswith(":"):
            os.write(terminal, (answers.pop(0) + "\n").encode())
            unanswered = ""
        elif not ready and proc.poll() is not None:
            return output
    raise AssertionError(f"manage.py did not finish: {output}")


def signs_in(username: str, password: str) -> bool:
    """The admin's login form accepts the pair (a redirect to the admin, not the form again)."""
    answer = Client().post("/admin/login/", {"username": username, "password": password})
    return answer.status_code == 302


def documented(command: str) -> None:
    assert command in DOC, f"docs/admin-guide.md no longer shows `{command}`"


@pytest.mark.slow  # manage.py processes
@pytest.mark.django_db(transaction=True)
def test_the_operators_commands_recover_the_superuser():
    get_user_model().objects.create_superuser("admin", "admin@localhost", "forgotten")

    documented("python manage.py changepassword admin")
    manage("changepassword", "admin", answers=("a-new-password-1",) * 2)
    assert signs_in("admin", "a-new-password-1") and not signs_in("admin", "forgotten")

    listing = next(line for line in DOC.splitlines() if "is_superuser=True" in line).strip()
    assert listing.startswith("python manage.py shell -c ")
    code = listing.removeprefix("python manage.py shell -c ").strip('"')
    listed = re.sub(r"\x1b\[[0-9;]*m", "", manage("shell", "-c", code))  # no terminal colours
    assert listed.splitlines()[-1].split() == ["admin"]

    documented("python manage.py createsuperuser --username rescue --email it@school.example")
    manage(
        "createsuperuser",
        "--username",
        "rescue",
        "--email",
        "it@school.example",
        answers=("a-rescue-password",) * 2,
    )
    assert signs_in("rescue", "a-rescue-password")

    documented("createsuperuser --noinput --username rescue --email it@school.example")
    manage(
        *("createsuperuser", "--noinput", "--username", "rescue2", "--email", "it@school.example"),
        env={"DJANGO_SUPERUSER_PASSWORD": "a-scripted-password"},
    )
    assert signs_in("rescue2", "a-scripted-password")


@pytest.mark.slow  # a manage.py process
@pytest.mark.django_db(transaction=True)
def test_a_login_lock_is_lifted_by_the_documented_command(settings):
    get_user_model().objects.create_superuser("admin", "admin@localhost", "the-password")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        assert not signs_in("admin", "a-wrong-guess")
    assert not signs_in("admin", "the-password")  # locked, even with the right one
    documented("python manage.py axes_reset_username USERNAME")
    manage("axes_reset_username", "admin")
    assert signs_in("admin", "the-password")


@pytest.mark.django_db
def test_the_platform_admin_resets_an_institution_admins_password():
    """The person's page (Authentication › Users) and its "Reset password", as the guide says."""
    User = get_user_model()
    alice = User.objects.create_user("alice", password="lost", is_staff=True)
    school = Institution.objects.create(name="Springfield High")
    AdminProfile.objects.create(user=alice, institution=school, role="admin")
    operator = Client()
    operator.force_login(User.objects.create_superuser("root", "root@localhost", "pw"))
    change = operator.get(f"/admin/auth/user/{alice.pk}/change/")
    assert "Reset password" in change.content.decode()
    url = f"/admin/auth/user/{alice.pk}/password/"
    done = operator.post(url, {"password1": "set-by-root", "password2": "set-by-root"})
    assert done.status_code == 302, done.content[:500]
    assert signs_in("alice", "set-by-root") and not signs_in("alice", "lost")
    # An institution admin cannot reach that page for a colleague.
    assert Client().get(url).status_code == 302  # signed out: the login page
    bob = User.objects.create_user("bob", is_staff=True)
    AdminProfile.objects.create(user=bob, institution=school, role="admin")
    colleague = Client()
    colleague.force_login(bob)
    assert colleague.get(url).status_code == 403

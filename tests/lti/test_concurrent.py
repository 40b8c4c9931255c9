"""Two first instructor launches of one LMS course at the same moment (PostgreSQL, two
connections): one course is made, the other launch is a clear 409 refusal, never two courses
nor a 500."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from licensing.access.services import license_create
from licensing.models import Course, CourseTeacher
from licensing.signin import lti

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_first_launches_make_one_course(public_dns, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs two connections that wait on each other's rows (PostgreSQL)")
    license = license_create(name="Alpha courses", institution="Alpha School", strategy="per_user")
    platform, _ = lti.lti_platform_configure(
        institution=license.institution,
        issuer="https://lms.alpha.example",
        client_id="tool",
        deployment_ids=["1"],
        jwks_url="https://lms.alpha.example/jwks",
        auth_login_url="https://lms.alpha.example/auth",
        license=license,
        allowance=None,
        allowance_period="week",
    )
    # Both launches have looked for the course (none yet) before either makes it.
    barrier = threading.Barrier(2, timeout=10)
    code_of = lti._course_code

    def after_the_lookup(*args):
        barrier.wait()
        return code_of(*args)

    monkeypatch.setattr(lti, "_course_code", after_the_lookup)
    outcomes: list[object] = []

    def run(sub: str) -> None:
        launch = lti.Launch(
            sub=sub,
            instructor=True,
            context_id="ctx-9",
            label="BIO",
            title="Biology",
            name="",
            email="",
        )
        try:
            outcomes.append(lti.launch_complete(platform=platform, launch=launch))
        except lti.LtiError as exc:
            outcomes.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(f"t-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert Course.objects.filter(lti_context_id="ctx-9").count() == 1
    refused = [o for o in outcomes if isinstance(o, lti.LtiError)]
    assert len(outcomes) == 2 and len(refused) == 1
    assert (refused[0].reason, refused[0].status) == ("concurrent_launch", 409)
    assert CourseTeacher.objects.count() == 1


@pytest.fixture
def public_dns(monkeypatch):
    from core import outbound

    monkeypatch.setattr(outbound, "getaddrinfo_sync", lambda host, port: ["93.184.215.14"])

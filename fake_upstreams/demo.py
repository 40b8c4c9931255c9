"""The demo school of a first run, declared once: its people, its course, and how its
development identity provider and LMS simulator are registered with the gateway.

`python -m fake_upstreams oidc` (DevIdentityProvider, fake_upstreams/oidc.py) offers these
people on its sign-in page, `python -m fake_upstreams lti` (DevLms, fake_upstreams/lti.py)
launches them into the course, and `manage.py setup_demo` (scripts/run.sh's setup) makes them
the same accounts of the gateway on both ways in (licensing/management/demo.py). Development
tools only: anyone who can reach the identity provider's page signs in as anyone on it,
admin included (docs/decisions/dev-tools.md).
"""

from __future__ import annotations

from dataclasses import dataclass

BANNER = "DEVELOPMENT IDENTITY PROVIDER - not for real use"
LMS_BANNER = "LMS SIMULATOR - a development tool, not a real LMS"

INSTITUTION = "Demo school"
EMAIL_DOMAIN = "demo-school.example"
# Students sign in onto this license (a wallet each); the course is under it too, so a student
# is one end user whether they come through the identity provider or the LMS.
STUDENT_LICENSE = "Demo school students"
STUDENT_BUDGET = 5_000_000  # micro-credits a student may spend a month
COURSE_ALLOWANCE = 1_000_000  # micro-credits a student may spend a week in the course

# The identity provider's client, and the LMS's registration of the gateway (a tool). Not
# secrets: the development tools listen on 127.0.0.1 only, and the gateway takes them only
# from a loopback address (licensing/management/demo.py).
IDP_CLIENT_ID = "gateway-dev"
IDP_CLIENT_SECRET = "dev-only-not-a-secret"
LMS_CLIENT_ID = "gateway-dev"
LMS_DEPLOYMENT_ID = "dev-1"

GROUPS = {
    "student": "demo-students",
    "teacher": "demo-teachers",
    "admin": "demo-admins",
}


@dataclass(frozen=True)
class DemoPerson:
    login: str  # the subject (`sub`) at the identity provider and the LMS alike
    name: str
    email: str
    role: str  # "student", "teacher" or "admin"

    @property
    def groups(self) -> list[str]:
        return [GROUPS[self.role]]


PEOPLE = (
    DemoPerson("demo-amira", "Amira Haddad", f"amira@{EMAIL_DOMAIN}", "student"),
    DemoPerson("demo-ben", "Ben Keller", f"ben@{EMAIL_DOMAIN}", "student"),
    DemoPerson("demo-clara", "Clara Novak", f"clara@{EMAIL_DOMAIN}", "teacher"),
    DemoPerson("demo-david", "David Okafor", f"david@{EMAIL_DOMAIN}", "admin"),
)


@dataclass(frozen=True)
class DemoCourse:
    context_id: str  # the LMS's id of the course (LTI's context claim)
    code: str
    title: str


COURSE = DemoCourse("demo-course-ai", "AI101", "Introduction to AI")


def person(login: str) -> DemoPerson | None:
    return next((p for p in PEOPLE if p.login == login), None)

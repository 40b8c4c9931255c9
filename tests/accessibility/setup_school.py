"""A school of its own for each accessibility module on the session's README server, made in one
`manage.py shell`: a row of every model an institution admin uses (so that every list has a row
and every change form can be opened) and the people who see the pages: an institution admin, a
teacher of a course with a window, a student who is a member of it (signed in as the SSO
callback leaves them: a session), a signed-in user with no access, and a colleague invited to
set their password."""

from __future__ import annotations

import re
from dataclasses import dataclass

PASSWORD = "a11y-pw-{tag}-1"

_SETUP = """
from datetime import timedelta
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone
from licensing.access.credentials import api_key_create
from licensing.access.services import institution_admin_create, license_create
from licensing.courses.services import (course_create, course_key_create, course_member_add,
                                        course_window_add)
from licensing.models import (BudgetAlert, CourseTeacher, EndUser, IdentityProvider, Institution,
                              JwtIssuer, LtiIdentity, LtiLaunchState, LtiPlatform, SsoIdentity)

SCHOOL, PASSWORD = "{school}", "{password}"
school, _ = Institution.objects.get_or_create(name=SCHOOL)
school.timezone, school.currency = "Europe/Berlin", "EUR"
school.micro_credits_per_currency_unit = 1_000_000
school.terms_of_use = "Use the gateway for your school work only."
school.save()
policy = {"version": 1, "services": {
    "chat_completions": {"params": {"model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                                    "max_tokens": {"max": 2000}}},
    "embeddings": {}}}
lic = license_create(name=SCHOOL + " students", institution=SCHOOL, limit=5_000_000,
                     period="monthly", strategy="per_user", policy=policy)
institution_admin_create(institution=SCHOOL, username="ines-{tag}", role="admin",
                         password=PASSWORD, email="ines-{tag}@access-school.example")
teacher = institution_admin_create(institution=SCHOOL, username="tom-{tag}", role="teacher",
                                   password=PASSWORD)
teacher.first_name, teacher.last_name = "Tom", "Teacher"
teacher.save()
course = course_create(license=lic, name="Accessible web pages", code="A11Y-{tag}",
                       allowance=1_000_000, allowance_period="week")
CourseTeacher.objects.create(course=course, user=teacher)
now = timezone.now()
course_window_add(course=course, kind="exam", starts_at=now + timedelta(days=30),
                  ends_at=now + timedelta(days=30, hours=2))
User = get_user_model()
student = User.objects.create_user("sam-{tag}", email="sam-{tag}@access-school.example",
                                   first_name="Sam", last_name="Student")
end_user = EndUser.objects.create(license=lic, user=student, subject="sam-{tag}")
course_member_add(course=course, end_user=end_user)
_, course_key = course_key_create(course=course, end_user=end_user, name="Sam's key", via="test")
api_key_create(license=lic, name="Library laptops")
provider = IdentityProvider.objects.create(
    institution=school, issuer="https://login-{tag}.access-school.example", client_id="gateway",
    student_license=lic, student_groups=["students"], teacher_groups=["teachers"])
SsoIdentity.objects.create(provider=provider, subject="sam-{tag}", user=student,
                           email="sam@access-school.example", groups=["students"])
JwtIssuer.objects.create(institution=school, license=lic,
                         issuer="https://lms-{tag}.access-school.example",
                         audience="gateway", algorithms=["RS256"],
                         jwks_url="https://lms.access-school.example/jwks")
# bulk_create: the model's save() resolves the LMS's host names, and these do not exist.
[platform] = LtiPlatform.objects.bulk_create([LtiPlatform(
    institution=school, issuer="https://moodle-{tag}.access-school.example", client_id="gw",
    deployment_ids=["1"], jwks_url="https://moodle.access-school.example/jwks",
    auth_login_url="https://moodle.access-school.example/auth", license=lic)])
LtiIdentity.objects.create(platform=platform, subject="lti-sam-{tag}", user=student,
                           name="Sam Student")
LtiLaunchState.objects.create(platform=platform, state="a11y-state-{tag}",
                              nonce="a11y-nonce-{tag}")
BudgetAlert.objects.create(license=lic, period="monthly", window_start=now, holder="license",
                           spent=4_100_000, threshold=4_000_000, limit=5_000_000)
nobody = User.objects.create_user("nora-{tag}", email="nora-{tag}@elsewhere.example")
# A colleague invited and not yet signed in: the page where they set a password.
from licensing.access.colleagues import invitation_path
from licensing.models import AdminProfile
invited = User.objects.create_user("ivy-{tag}", is_staff=True)
invited.set_unusable_password()
invited.save()
AdminProfile.objects.create(user=invited, institution=school, role="reviewer")


def session_of(user):
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "licensing.signin.backends.GatewayModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


print("INSTITUTION", school.pk)
print("COURSE", course.pk)
print("STUDENT", end_user.pk)
print("LICENSE_TYPE", lic.license_type_id)
print("COURSE_KEY", course_key)
print("STUDENT_SESSION", session_of(student))
print("NOBODY_SESSION", session_of(nobody))
print("INVITATION", invitation_path(invited))
"""


@dataclass(frozen=True)
class School:
    name: str
    tag: str
    password: str
    institution: int  # the school's id
    course: int  # the course's id
    student: int  # the student's end user id
    license_type: int  # the id of the type of the course's license (its own policy)
    course_key: str  # the student's course key
    sessions: dict[str, str]  # "student", "outsider": a session key
    invitation: str  # the path where an invited colleague sets a password
    printed: str = ""  # what the setup's `then` printed

    def path_of(self, path: str) -> str:
        """A page's path with this school's ids filled in (`{course}`, `{student}`, ...)."""
        return path.format(
            course=self.course,
            invitation=self.invitation,
            student=self.student,
            institution=self.institution,
        )

    @property
    def admin(self) -> str:
        return f"ines-{self.tag}"

    @property
    def teacher(self) -> str:
        return f"tom-{self.tag}"


# Between the setup's output and what `then` prints.
_THEN = "<<<THEN>>>"


def make_school(server, name: str, tag: str, then: str = "") -> School:
    """The school `name` on the README server; `tag` keeps its people's names and issuers apart
    from another module's. `then`: more code for the same `manage.py shell` (one Django start,
    not two), what it prints kept as the School's `printed`."""
    password = PASSWORD.format(tag=tag)
    script = _SETUP.replace("{school}", name).replace("{tag}", tag)
    script = script.replace("{password}", password) + f"\nprint({_THEN!r})\n" + then
    printed, _, after = server.manage("shell", "-c", script).partition(_THEN + "\n")
    found = dict(re.findall(r"^([A-Z_]+) (\S+)$", printed, re.M))
    return School(
        name=name,
        tag=tag,
        password=password,
        institution=int(found["INSTITUTION"]),
        course=int(found["COURSE"]),
        student=int(found["STUDENT"]),
        license_type=int(found["LICENSE_TYPE"]),
        course_key=found["COURSE_KEY"],
        sessions={"student": found["STUDENT_SESSION"], "outsider": found["NOBODY_SESSION"]},
        invitation=found["INVITATION"],
        printed=after,
    )

"""`manage.py setup_demo`'s demo school (licensing/management/demo.py): its development sign-in
is configured only where no real one is (an identity provider or an LMS of the demo school's
own, `DEV_SIGN_IN=off`, a gateway served elsewhere than this computer, a tool not on
127.0.0.1), every run leaves what is there as it is, and the demo key is kept in a file of
its own (mode 0600) and used again while the database still knows it."""

from __future__ import annotations

import stat

import pytest
from django.contrib.auth import get_user_model

from fake_upstreams import demo
from licensing.access.credentials import api_key_create
from licensing.access.services import license_create
from licensing.management.commands.setup_demo import guide_lines
from licensing.management.demo import (
    demo_key,
    demo_school_configure,
    dev_sign_in_plan,
)
from licensing.models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    IdentityProvider,
    Institution,
    LtiIdentity,
    LtiPlatform,
    SsoIdentity,
)
from licensing.signin.lti import lti_platform_configure

pytestmark = pytest.mark.both_databases

IDP, LMS = "http://127.0.0.1:9103", "http://127.0.0.1:9104"
LOCAL = "http://127.0.0.1:8000"


@pytest.fixture
def outbound(settings):
    """The gateway may reach the tools on loopback, as scripts/run.sh lets it."""
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, 9103, 9104, 9203, 9204}),
    }


@pytest.fixture
def school(db, outbound):
    """The demo license and its institution, as setup_demo makes them first."""
    return license_create(name="demo", institution=demo.INSTITUTION).institution


def plan(idp=IDP, lms=LMS, public=LOCAL):
    return dev_sign_in_plan(idp_url=idp, lms_url=lms, public_url=public)


def test_a_fresh_demo_school_gets_both_tools_and_its_people(school):
    made = demo_school_configure(plan())
    assert made is not None and (made.idp, made.lms) == (IDP, LMS)
    provider = IdentityProvider.objects.get(institution=school)
    assert (provider.issuer, provider.client_id) == (IDP, demo.IDP_CLIENT_ID)
    assert provider.student_license.name == demo.STUDENT_LICENSE
    platform = LtiPlatform.objects.get(institution=school)
    assert (platform.issuer, platform.jwks_url) == (LMS, LMS + "/jwks")
    course = made.course
    assert (course.code, course.lti_context_id) == (demo.COURSE.code, demo.COURSE.context_id)
    assert course.license == provider.student_license == platform.license
    User = get_user_model()
    for person in demo.PEOPLE:
        user = User.objects.get(username=person.email)
        assert not user.has_usable_password()  # they sign in through the tools only
        # One account whichever way they come in.
        assert SsoIdentity.objects.get(provider=provider, subject=person.login).user == user
        assert LtiIdentity.objects.get(platform=platform, subject=person.login).user == user
    members = CourseMember.objects.filter(course=course)
    assert sorted(m.end_user.user.username for m in members) == [
        p.email for p in demo.PEOPLE if p.role == "student"
    ]
    [teacher] = CourseTeacher.objects.filter(course=course)
    assert teacher.user.username == demo.PEOPLE[2].email
    roles = dict(
        AdminProfile.objects.filter(institution=school).values_list("user__username", "role")
    )
    assert roles == {demo.PEOPLE[2].email: "teacher", demo.PEOPLE[3].email: "admin"}


def test_every_run_leaves_the_demo_school_as_it_is(school):
    demo_school_configure(plan())
    counts = _counts()
    events = AuditEvent.objects.count()
    again = demo_school_configure(plan())
    assert _counts() == counts
    assert AuditEvent.objects.count() == events  # nothing configured again, nothing audited
    assert again is not None and again.course.pk == Course.objects.get().pk


def test_tools_on_other_ports_keep_their_registrations_and_people(school):
    demo_school_configure(plan())
    provider = IdentityProvider.objects.get()
    platform = LtiPlatform.objects.get()
    counts = _counts()
    demo_school_configure(plan(idp="http://127.0.0.1:9203", lms="http://127.0.0.1:9204"))
    assert IdentityProvider.objects.get().pk == provider.pk
    assert IdentityProvider.objects.get().issuer == "http://127.0.0.1:9203"
    moved = LtiPlatform.objects.get()
    assert (moved.pk, moved.issuer, moved.auth_login_url) == (
        platform.pk,
        "http://127.0.0.1:9204",
        "http://127.0.0.1:9204/auth",
    )
    assert _counts() == counts


def test_never_when_the_school_signs_in_with_a_real_identity_provider(school):
    # (Made directly: no name resolves here, and the guard would refuse it.)
    real = IdentityProvider.objects.create(
        institution=school,
        issuer="https://login.example.edu/realms/demo",
        client_id="gateway",
        client_secret="real-secret",
    )
    chosen = plan()
    assert (chosen.idp, chosen.lms) == (None, LMS)
    assert "signs in with https://login.example.edu/realms/demo" in chosen.notes[0]
    demo_school_configure(chosen)
    after = IdentityProvider.objects.get()
    assert (after.pk, after.issuer, after.client_id) == (real.pk, real.issuer, "gateway")
    assert not SsoIdentity.objects.exists()
    assert LtiIdentity.objects.count() == len(demo.PEOPLE)


def test_never_when_the_school_launches_from_a_real_lms(school):
    license = license_create(name="Real courses", institution=demo.INSTITUTION)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("licensing.models.signin._outbound_url_errors", lambda **urls: {})
        lti_platform_configure(
            institution=school,
            issuer="https://moodle.example.edu",
            client_id="7xYz",
            deployment_ids=["3"],
            jwks_url="https://moodle.example.edu/mod/lti/certs.php",
            auth_login_url="https://moodle.example.edu/mod/lti/auth.php",
            license=license,
            allowance=None,
            allowance_period="week",
        )
    chosen = plan()
    assert (chosen.idp, chosen.lms) == (IDP, None)
    assert "launches from https://moodle.example.edu" in chosen.notes[0]
    demo_school_configure(chosen)
    assert LtiPlatform.objects.get().issuer == "https://moodle.example.edu"
    assert not LtiIdentity.objects.exists()


def test_a_development_tool_is_never_taken_for_a_real_one(school):
    """A provider with the tools' client id but not on loopback is a real one."""
    IdentityProvider.objects.create(
        institution=school, issuer="https://idp.example.edu", client_id=demo.IDP_CLIENT_ID
    )
    assert plan().idp is None


@pytest.mark.parametrize(
    "value", ["off", "OFF", "0", "false", "no"], ids=lambda v: f"DEV_SIGN_IN={v}"
)
def test_never_when_dev_sign_in_is_off(school, monkeypatch, value):
    monkeypatch.setenv("DEV_SIGN_IN", value)
    chosen = plan()
    assert (chosen.idp, chosen.lms) == (None, None)
    assert chosen.notes == ["DEV_SIGN_IN=off: no development identity provider or LMS simulator"]
    assert demo_school_configure(chosen) is None
    assert not IdentityProvider.objects.exists() and not LtiPlatform.objects.exists()
    assert not get_user_model().objects.filter(email__endswith=demo.EMAIL_DOMAIN).exists()


def test_never_for_a_gateway_served_elsewhere(school):
    chosen = plan(public="https://gateway.example.edu")
    assert (chosen.idp, chosen.lms) == (None, None)
    assert "GATEWAY_PUBLIC_URL is https://gateway.example.edu" in chosen.notes[0]
    assert guide_lines(None, chosen) == [f"No development sign-in: {chosen.notes[0]}."]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:9103",
        "https://idp.example.edu",
        "http://127.0.0.1.example.com:9103",
        "not a url",
        "http://[::1",  # urlsplit refuses it
        "http://127.0.0.1:9103\x00",
    ],
)
def test_never_with_a_tool_elsewhere_than_this_computer(school, url):
    chosen = plan(idp=url, lms=url)
    assert (chosen.idp, chosen.lms) == (None, None)
    assert len(chosen.notes) == 2
    assert demo_school_configure(chosen) is None


def test_the_guide_says_how_each_person_signs_in(school):
    chosen = plan()
    made = demo_school_configure(chosen)
    text = "\n".join(guide_lines(made, chosen))
    course = Course.objects.get()
    assert f"As a teacher: http://127.0.0.1:8000/portal/courses/{course.pk}/" in text
    assert 'As a student: http://127.0.0.1:8000/portal/ -> "Sign in with Demo school"' in text
    assert "Amira Haddad or Ben Keller" in text and "David Okafor" in text
    assert f"From the LMS: {LMS}/" in text and "not for real use" in text


# --- the demo key --------------------------------------------------------------------------


def test_the_demo_key_is_kept_and_used_again(school, tmp_path):
    license = school.licenses.get(name="demo")
    path = tmp_path / "var" / "demo-api-key"
    key, reused = demo_key(license=license, key_file=path, name="run.sh demo key")
    assert not reused and path.read_text() == key + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, reused = demo_key(license=license, key_file=path, name="run.sh demo key")
    assert (again, reused) == (key, True)
    assert ApiKey.objects.filter(license=license).count() == 1
    assert key not in str(list(ApiKey.objects.values()))  # only its hash is stored


@pytest.mark.parametrize(
    "spoil",
    ["revoked", "expired", "another license's", "unknown here", "garbage", "not ascii", "empty"],
)
def test_a_kept_key_the_database_does_not_take_is_replaced(school, tmp_path, spoil):
    license = school.licenses.get(name="demo")
    path = tmp_path / "demo-api-key"
    key, _ = demo_key(license=license, key_file=path, name="")
    row = ApiKey.objects.get()
    if spoil == "revoked":
        ApiKey.objects.filter(pk=row.pk).update(active=False)
    elif spoil == "expired":
        ApiKey.objects.filter(pk=row.pk).update(expires_at="2000-01-01T00:00:00Z")
    elif spoil == "another license's":
        other = license_create(name="other", institution="Elsewhere")
        path.write_text(api_key_create(license=other)[1])
    elif spoil == "unknown here":
        path.write_text("sk-svc-" + "x" * 43)
    else:
        path.write_bytes(
            {"garbage": b"\x00\xff" * 50, "not ascii": "sk-svc-é".encode(), "empty": b""}[spoil]
        )
    new, reused = demo_key(license=license, key_file=path, name="")
    assert not reused and new != key
    assert path.read_text().strip() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_without_a_key_file_every_run_makes_a_new_key(school):
    license = school.licenses.get(name="demo")
    first, _ = demo_key(license=license, key_file=None, name="")
    second, _ = demo_key(license=license, key_file=None, name="")
    assert first != second and ApiKey.objects.count() == 2


def _counts() -> dict[str, int]:
    models = (
        get_user_model(),
        AdminProfile,
        EndUser,
        Course,
        CourseMember,
        CourseTeacher,
        IdentityProvider,
        SsoIdentity,
        LtiPlatform,
        LtiIdentity,
        Institution,
    )
    return {model.__name__: model.objects.count() for model in models}

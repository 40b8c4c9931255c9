"""Single sign-on end to end: the gateway (Django's test browser) and two fake IdPs over real
HTTP. Sign-in with RS256 and ES256, roles from the groups claim at every sign-in, one
institution's IdP never giving a role in another, and every hostile case of issue 25 item 4
refused with a page, an audit row and no session."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.test import Client

from licensing.access.credentials import api_key_create
from licensing.models import AdminProfile, ApiKey, AuditEvent, EndUser, SsoIdentity
from licensing.signin import oidc, sso_views

from .conftest import at_idp, query_of, sign_in, start

pytestmark = pytest.mark.django_db

User = get_user_model()


def refusals():
    return list(
        AuditEvent.objects.filter(action="sign_in_refused").values_list("detail__reason", flat=True)
    )


def assert_refused(browser, response, status, reason):
    assert response.status_code == status, response.content[:800]
    assert b"Sign-in refused" in response.content
    assert reason in refusals()
    assert SESSION_KEY not in browser.session


# --- sign-in works ---------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_admin_signs_in_and_lands_on_the_admin(browser, world, alg, gateway_log):
    alpha = world[0]
    alpha.idp.alg = alg
    alpha.idp.sign_in_next(
        "alice-sub", email="Alice@Alpha.example.edu", groups=["alpha-admins", "other"]
    )
    authorize = start(browser, alpha.provider)
    params = query_of(authorize)
    assert params["code_challenge_method"] == "S256"
    assert params["redirect_uri"] == f"http://127.0.0.1:8000/sso/{alpha.provider.pk}/callback/"
    assert params["scope"] == "openid email profile"
    assert len(params["state"]) >= 40 and len(params["nonce"]) >= 40
    session_before = browser.session.session_key
    response = browser.get(at_idp(authorize))
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert browser.session.session_key != session_before  # rotated at login
    user = User.objects.get(pk=browser.session[SESSION_KEY])
    assert user.username == "alice@alpha.example.edu"
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    profile = AdminProfile.objects.get(user=user)
    assert (profile.institution, profile.role, profile.managed_by_idp) == (
        alpha.institution,
        "admin",
        True,
    )
    identity = SsoIdentity.objects.get(user=user)
    assert (identity.provider, identity.subject) == (alpha.provider, "alice-sub")
    assert identity.groups == ["alpha-admins", "other"]
    event = AuditEvent.objects.get(action="sign_in")
    assert (event.actor, event.institution) == (user, alpha.institution)
    assert event.detail["staff_role"] == "admin"
    assert AuditEvent.objects.filter(action="role_changed", actor=user).count() == 1
    assert any(line.startswith("SSO sign-in: user") for line in gateway_log)
    # The admin opens, with the institution's pages.
    page = browser.get("/admin/")
    assert page.status_code == 200
    assert b"Licenses" in page.content
    # Basic browser authentication by default (the fake offers both).
    token_request = [r for r in alpha.idp.requests if r.path == "/token"][-1]
    assert token_request.headers["authorization"].startswith("Basic ")


def test_client_secret_post_when_the_idp_supports_only_that(browser, world):
    alpha = world[0]
    alpha.idp.auth_methods = ["client_secret_post"]
    alpha.idp.sign_in_next("r", email="r@alpha.example.edu", groups=["alpha-reviewers"])
    assert sign_in(browser, alpha.provider).status_code == 302
    token_request = [r for r in alpha.idp.requests if r.path == "/token"][-1]
    assert "authorization" not in token_request.headers
    assert "client_secret=alpha-secret" in token_request.text


def test_secret_from_the_environment(browser, world, monkeypatch):
    alpha = world[0]
    alpha.provider.client_secret, alpha.provider.client_secret_env = "", "ALPHA_OIDC_SECRET"
    alpha.provider.save()
    monkeypatch.setenv("ALPHA_OIDC_SECRET", "alpha-secret")
    alpha.idp.sign_in_next("r", email="r@alpha.example.edu", groups=["alpha-reviewers"])
    assert sign_in(browser, alpha.provider).status_code == 302
    monkeypatch.setenv("ALPHA_OIDC_SECRET", "wrong")
    browser.logout()
    alpha.idp.sign_in_next("r", email="r@alpha.example.edu", groups=["alpha-reviewers"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "token_request_refused")


def test_reviewer_and_precedence(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next(
        "bob", email="bob@alpha.example.edu", groups=["alpha-teachers", "alpha-reviewers"]
    )
    assert sign_in(browser, alpha.provider, "/admin/licensing/").status_code == 302
    assert AdminProfile.objects.get(user__username="bob@alpha.example.edu").role == "reviewer"


def test_student_gets_an_end_user_on_the_student_license(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("stu", email="stu@alpha.example.edu", groups="alpha-students")
    response = sign_in(browser, alpha.provider)
    assert response.status_code == 302 and response["Location"] == "/portal/"
    user = User.objects.get(username="stu@alpha.example.edu")
    assert not user.is_staff and not AdminProfile.objects.filter(user=user).exists()
    end_user = EndUser.objects.get(user=user)
    assert (end_user.license, end_user.subject, end_user.issuer, end_user.active) == (
        alpha.license,
        "stu",
        None,
        True,
    )
    # A student's next=/admin/ is not where they land.
    browser.logout()
    alpha.idp.sign_in_next("stu", email="stu@alpha.example.edu", groups="alpha-students")
    assert sign_in(browser, alpha.provider, "/admin/")["Location"] == "/portal/"


def test_next_must_be_a_local_path(browser, world):
    alpha = world[0]
    for bad in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:x"):
        browser.logout()
        alpha.idp.sign_in_next("r", email="r@alpha.example.edu", groups=["alpha-reviewers"])
        assert sign_in(browser, alpha.provider, bad)["Location"] == "/admin/"


def test_same_email_at_two_idps_are_two_users(browser, world):
    alpha, beta = world
    alpha.idp.sign_in_next("same", email="pat@example.org", groups=["alpha-admins"])
    assert sign_in(browser, alpha.provider).status_code == 302
    browser.logout()
    beta.idp.sign_in_next("same", email="pat@example.org", groups=["beta-admins"])
    assert sign_in(browser, beta.provider).status_code == 302
    users = {i.provider_id: i.user for i in SsoIdentity.objects.select_related("user")}
    assert users[alpha.provider.pk] != users[beta.provider.pk]
    assert users[alpha.provider.pk].username == "pat@example.org"
    assert users[beta.provider.pk].username.startswith(f"sso{beta.provider.pk}-")
    assert AdminProfile.objects.get(user=users[beta.provider.pk]).institution == beta.institution
    assert AdminProfile.objects.get(user=users[alpha.provider.pk]).institution == alpha.institution


# --- roles at every sign-in ------------------------------------------------------------------


def test_a_group_removed_at_the_idp_removes_the_role(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("carol", email="carol@alpha.example.edu", groups=["alpha-admins"])
    sign_in(browser, alpha.provider)
    user = User.objects.get(username="carol@alpha.example.edu")
    browser.logout()
    alpha.idp.sign_in_next("carol", email="carol@alpha.example.edu", groups=["alpha-reviewers"])
    sign_in(browser, alpha.provider)
    assert AdminProfile.objects.get(user=user).role == "reviewer"
    browser.logout()
    alpha.idp.sign_in_next("carol", email="carol@alpha.example.edu", groups=["unmapped"])
    response = sign_in(browser, alpha.provider)
    assert_refused(browser, response, 403, "no_mapped_group")
    user.refresh_from_db()
    assert not user.is_staff and not AdminProfile.objects.filter(user=user).exists()
    changes = list(
        AuditEvent.objects.filter(action="role_changed", actor=user)
        .order_by("id")
        .values_list("detail__change", flat=True)
    )
    assert changes == [
        "staff role admin given",
        "staff role admin -> reviewer",
        "staff role reviewer removed",
    ]


def test_a_lost_student_role_deactivates_and_revokes_keys(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("dan", email="dan@alpha.example.edu", groups=["alpha-students"])
    sign_in(browser, alpha.provider)
    end_user = EndUser.objects.get(user__username="dan@alpha.example.edu")
    key, _ = api_key_create(license=alpha.license, name="portal")
    ApiKey.objects.filter(pk=key.pk).update(end_user=end_user)
    browser.logout()
    alpha.idp.sign_in_next("dan", email="dan@alpha.example.edu", groups=["alpha-teachers"])
    assert sign_in(browser, alpha.provider).status_code == 302
    end_user.refresh_from_db()
    key.refresh_from_db()
    assert not end_user.active and not key.active
    assert AdminProfile.objects.get(user=end_user.user).role == "teacher"
    # The group back: the same end user, active again (the revoked key stays revoked).
    browser.logout()
    alpha.idp.sign_in_next("dan", email="dan@alpha.example.edu", groups=["alpha-students"])
    sign_in(browser, alpha.provider)
    end_user.refresh_from_db()
    key.refresh_from_db()
    assert end_user.active and not key.active
    assert EndUser.objects.filter(user=end_user.user).count() == 1
    assert not AdminProfile.objects.filter(user=end_user.user).exists()


def test_an_idp_never_gives_a_role_in_another_institution(browser, world):
    alpha, beta = world
    # Beta's group names sent by Alpha's IdP mean nothing at Alpha.
    alpha.idp.sign_in_next("eve", email="eve@alpha.example.edu", groups=["beta-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "no_mapped_group")
    assert not AdminProfile.objects.filter(institution=beta.institution).exists()
    # A user with a role at Beta (made by Beta's IdP) is refused at Alpha, whatever it sends.
    beta.idp.sign_in_next("frank", email="frank@beta.example.edu", groups=["beta-admins"])
    sign_in(browser, beta.provider)
    frank = User.objects.get(username="frank@beta.example.edu")
    SsoIdentity.objects.filter(user=frank).update(provider=alpha.provider)  # same user at A
    browser.logout()
    alpha.idp.sign_in_next("frank", email="frank@beta.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "role_in_other_institution")
    assert AdminProfile.objects.get(user=frank).institution == beta.institution


def test_refused_page_says_whom_to_ask(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("g", email="g@alpha.example.edu", groups=[])
    response = sign_in(browser, alpha.provider)
    assert_refused(browser, response, 403, "no_mapped_group")
    assert b"your school&#x27;s IT" in response.content or b"your school's IT" in response.content
    admin = User.objects.create_user("head", email="head@alpha.example.edu")
    AdminProfile.objects.create(user=admin, institution=alpha.institution, role="admin")
    alpha.idp.sign_in_next("g", email="g@alpha.example.edu", groups=[])
    response = sign_in(browser, alpha.provider)
    assert b"mailto:head@alpha.example.edu" in response.content
    assert b"none of the groups" in response.content.lower()


def test_a_superuser_never_signs_in_through_an_idp(browser, world):
    alpha = world[0]
    root = User.objects.create_superuser("root", "root@alpha.example.edu", "pw")
    SsoIdentity.objects.create(provider=alpha.provider, subject="root-sub", user=root)
    alpha.idp.sign_in_next("root-sub", email="root@alpha.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "role_in_other_institution")


# --- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "status", "reason"),
    [
        ("wrong_key", 403, "bad_signature"),
        ("wrong_aud", 403, "wrong_audience"),
        ("wrong_nonce", 403, "wrong_nonce"),
        ("expired", 403, "expired"),
    ],
)
@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_bad_id_tokens_are_refused(browser, world, failure, status, reason, alg, gateway_log):
    alpha = world[0]
    alpha.idp.alg = alg
    alpha.idp.sign_in_next("h", email="h@alpha.example.edu", groups=["alpha-admins"])
    authorize = start(browser, alpha.provider)
    alpha.idp.failure = failure
    response = browser.get(at_idp(authorize))
    assert_refused(browser, response, status, reason)
    assert any(line.startswith(f"SSO sign-in refused ({reason})") for line in gateway_log)
    assert not User.objects.filter(username="h@alpha.example.edu").exists()


def test_a_token_signed_by_the_other_idp_is_refused(browser, world):
    alpha, beta = world
    beta.idp.sign_in_next("x", email="x@alpha.example.edu", groups=["alpha-admins"])
    # Alpha's callback, fed a code from Beta's IdP: Alpha's token endpoint does not know it.
    authorize = start(browser, alpha.provider)
    state = query_of(authorize)["state"]
    other = at_idp(start(Client(), beta.provider))
    code = query_of(other)["code"]
    response = browser.get(f"/sso/{alpha.provider.pk}/callback/", {"code": code, "state": state})
    assert_refused(browser, response, 403, "token_request_refused")


def test_a_forged_id_token_is_refused(world):
    alpha = world[0]
    metadata = oidc.discovery_cache.metadata_for(alpha.idp.issuer)
    for forged in (
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",  # alg none
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",  # HS256
        "not a token",
        "a.b.c",
        "\x00.\ud800.x",
        "x" * 100_000,
    ):
        with pytest.raises(oidc.OidcError) as caught:
            oidc.verify_id_token(forged, metadata=metadata, client_id="gw-alpha", nonce="n")
        assert caught.value.reason in ("invalid_token", "bad_signature")


def test_unverified_email_is_refused(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next(
        "i", email="i@alpha.example.edu", email_verified=False, groups=["alpha-admins"]
    )
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "email_not_verified")
    alpha.idp.sign_in_next(
        "i", email="i@alpha.example.edu", email_verified=None, groups=["alpha-admins"]
    )
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "email_not_verified")
    assert not User.objects.filter(username="i@alpha.example.edu").exists()
    # Entra ID's `xms_edov` says the domain is verified: accepted.
    alpha.idp.sign_in_next(
        "i",
        email="i@alpha.example.edu",
        email_verified=None,
        groups=["alpha-admins"],
        xms_edov=True,
    )
    assert sign_in(browser, alpha.provider).status_code == 302


def test_a_replayed_callback_url_is_refused(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("j", email="j@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    assert browser.get(callback).status_code == 302
    browser.logout()
    assert_refused(browser, browser.get(callback), 400, "no_pending_login")
    # Stolen: another browser (no pending login of its own) replays it.
    thief = Client()
    response = thief.get(callback)
    assert response.status_code == 400 and SESSION_KEY not in thief.session


def test_a_reused_code_is_refused(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("k", email="k@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    assert browser.get(callback).status_code == 302
    browser.logout()
    # A new login in the same browser; the old code with the new state.
    state = query_of(start(browser, alpha.provider))["state"]
    code = query_of(callback)["code"]
    response = browser.get(f"/sso/{alpha.provider.pk}/callback/", {"code": code, "state": state})
    assert_refused(browser, response, 403, "token_request_refused")


def test_state_mismatch_is_refused_and_the_pending_login_is_gone(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("l", email="l@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    code = query_of(callback)["code"]
    response = browser.get(f"/sso/{alpha.provider.pk}/callback/", {"code": code, "state": "x"})
    assert_refused(browser, response, 400, "state_mismatch")
    # The right state afterwards: nothing pending any more.
    assert_refused(browser, browser.get(callback), 400, "no_pending_login")


def test_the_callback_of_another_provider_is_refused(browser, world):
    alpha, beta = world
    alpha.idp.sign_in_next("m", email="m@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    mixed = callback.replace(f"/sso/{alpha.provider.pk}/", f"/sso/{beta.provider.pk}/")
    assert_refused(browser, browser.get(mixed), 400, "no_pending_login")


def test_a_pending_login_expires_after_ten_minutes(browser, world, monkeypatch):
    alpha = world[0]
    alpha.idp.sign_in_next("n", email="n@alpha.example.edu", groups=["alpha-admins"])
    now = sso_views.clock()
    monkeypatch.setattr(sso_views, "clock", lambda: now)
    callback = at_idp(start(browser, alpha.provider))
    monkeypatch.setattr(sso_views, "clock", lambda: now + 601)
    assert_refused(browser, browser.get(callback), 400, "login_expired")


def test_an_error_from_the_idp_is_refused(browser, world):
    alpha = world[0]
    callback = at_idp(start(browser, alpha.provider))  # nobody queued: access_denied
    assert query_of(callback)["error"] == "access_denied"
    assert_refused(browser, browser.get(callback), 403, "idp_error")


@pytest.mark.parametrize(
    ("failure", "where"),
    [("down", "login"), ("garbage", "login"), ("huge", "login"), ("wrong_issuer", "login")],
)
def test_an_idp_down_or_garbage_at_discovery(browser, world, failure, where):
    alpha = world[0]
    alpha.idp.failure = failure
    response = browser.get(f"/sso/{alpha.provider.pk}/login/")
    assert_refused(
        browser,
        response,
        502,
        "idp_unavailable" if failure != "wrong_issuer" else "discovery_invalid",
    )


@pytest.mark.parametrize("failure", ["down", "garbage"])
def test_an_idp_down_or_garbage_at_the_token_endpoint(browser, world, failure):
    alpha = world[0]
    alpha.idp.sign_in_next("o", email="o@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    alpha.idp.failure = failure
    response = browser.get(callback)
    assert response.status_code in (403, 502)
    assert refusals()[0] in ("token_request_refused", "idp_unavailable")
    assert SESSION_KEY not in browser.session


def test_a_slow_idp_is_a_clean_refusal(browser, world, monkeypatch):
    alpha = world[0]
    monkeypatch.setattr(oidc, "TIMEOUT", 0.3)
    alpha.idp.hold_next()
    try:
        response = browser.get(f"/sso/{alpha.provider.pk}/login/")
    finally:
        alpha.idp.release()
    assert_refused(browser, response, 502, "idp_unavailable")


def test_discovery_is_fetched_at_most_once_a_minute_after_a_failure(world):
    alpha = world[0]
    now = [1000.0]
    cache = oidc.DiscoveryCache(clock=lambda: now[0])
    alpha.idp.failure = "down"
    with pytest.raises(oidc.OidcError):
        cache.metadata_for(alpha.idp.issuer)
    alpha.idp.failure = None
    alpha.idp.clear()
    with pytest.raises(oidc.OidcError):
        cache.metadata_for(alpha.idp.issuer)
    assert alpha.idp.requests == []  # remembered, not asked again
    now[0] += 61
    assert cache.metadata_for(alpha.idp.issuer).issuer == alpha.idp.issuer
    assert len(alpha.idp.requests) == 1
    now[0] += 600
    cache.metadata_for(alpha.idp.issuer)
    assert len(alpha.idp.requests) == 1  # a good document is kept for an hour


@pytest.mark.parametrize(
    "query",
    [
        {"code": "\x00", "state": "x"},
        "code=" + "a" * 10_000 + "&state=%ED%A0%80",
        {"state": "x" * 10_000},
        {"error": "\x00" * 5},
        {},
    ],
)
def test_hostile_callback_parameters(browser, world, query):
    alpha = world[0]
    start(browser, alpha.provider)
    path = f"/sso/{alpha.provider.pk}/callback/"
    response = (
        browser.get(f"{path}?{query}") if isinstance(query, str) else browser.get(path, query)
    )
    assert response.status_code in (400, 403)
    assert SESSION_KEY not in browser.session


@pytest.mark.parametrize("path", ["/sso/999999/login/", "/sso/99999999999999999999999/login/"])
def test_unknown_providers(browser, world, path):
    assert browser.get(path).status_code == 404
    assert browser.get(path.replace("login", "callback")).status_code == 404


def test_an_inactive_provider_cannot_be_used(browser, world):
    alpha = world[0]
    alpha.provider.active = False
    alpha.provider.save()
    assert browser.get(f"/sso/{alpha.provider.pk}/login/").status_code == 404


def test_find_by_email_domain(browser, world):
    alpha, beta = world
    response = browser.get("/sso/find/", {"email": "someone@beta.example.edu", "next": "/portal/"})
    assert response.status_code == 302
    assert response["Location"] == f"/sso/{beta.provider.pk}/login/?next=%2Fportal%2F"
    for bad in ("nobody@else.example", "no-at-sign", "\x00@alpha.example.edu", "x" * 300):
        assert browser.get("/sso/find/", {"email": bad}).status_code == 404


def test_idp_reachable_only_through_the_outbound_guard(browser, world, settings):
    alpha = world[0]
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOW": ""}
    assert_refused(browser, browser.get(f"/sso/{alpha.provider.pk}/login/"), 502, "idp_unavailable")


def test_the_token_endpoint_is_not_reached_without_a_pending_login(browser, world):
    alpha = world[0]
    alpha.idp.clear()
    response = browser.get(f"/sso/{alpha.provider.pk}/callback/", {"code": "c", "state": "s"})
    assert response.status_code == 400
    assert [r.path for r in alpha.idp.requests] == []


def test_fake_refuses_a_wrong_pkce_verifier(world):
    alpha = world[0]
    alpha.idp.sign_in_next("p", groups=["alpha-admins"])
    url = (
        f"{alpha.idp.issuer}/authorize?response_type=code&client_id=gw-alpha&scope=openid"
        "&redirect_uri=http://x/cb&state=s&nonce=n&code_challenge=abc&code_challenge_method=S256"
    )
    code = query_of(httpx.get(url).headers["location"])["code"]
    answer = httpx.post(
        f"{alpha.idp.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": "http://x/cb",
            "code_verifier": "wrong",
        },
        auth=("gw-alpha", "alpha-secret"),
    )
    assert answer.status_code == 400 and "PKCE" in answer.text


def test_an_oversized_token_answer_is_a_clean_refusal(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("q", email="q@alpha.example.edu", groups=["alpha-admins"])
    callback = at_idp(start(browser, alpha.provider))
    alpha.idp.bloat_next(oidc.MAX_BYTES + 1)
    response = browser.get(callback)
    assert_refused(browser, response, 502, "idp_unavailable")


def test_post_outbound_form_follows_no_redirect(world):
    from core.outbound import Refused, post_outbound_form

    alpha = world[0]
    alpha.idp.fail_next(302, headers={"location": "http://169.254.169.254/"})
    with pytest.raises(Refused) as caught:
        post_outbound_form(f"{alpha.idp.issuer}/token", data={"a": "b"}, max_bytes=1000, timeout=5)
    assert caught.value.code == "redirect_not_allowed"
    with pytest.raises(Refused) as caught:
        post_outbound_form("http://10.0.0.1/token", data={}, max_bytes=1000, timeout=5)
    assert caught.value.code == "blocked_address"
    sent = alpha.idp.requests[-1]
    assert sent.method == "POST" and sent.text == "a=b"
    assert sent.headers["content-type"] == "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"iat": 4_000_000_000}, "invalid_iat"),
        ({"iss": "https://other.example"}, "invalid_iss"),
        ({"aud": ["gw-alpha", "someone-else"]}, "wrong_audience"),  # several: azp needed
        ({"aud": ["gw-alpha", "x"], "azp": "x"}, "wrong_audience"),
        ({"sub": ""}, "invalid_sub"),
        ({"sub": 12}, "invalid_sub"),
    ],
)
def test_claims_that_are_not_acceptable(browser, world, extra, reason):
    alpha = world[0]
    alpha.idp.sign_in_next("s", email="s@alpha.example.edu", groups=["alpha-admins"], **extra)
    assert_refused(browser, sign_in(browser, alpha.provider), 403, reason)


def test_several_audiences_with_our_azp_are_accepted(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next(
        "t",
        email="t@alpha.example.edu",
        groups=["alpha-admins"],
        aud=["gw-alpha", "api://other"],
        azp="gw-alpha",
    )
    assert sign_in(browser, alpha.provider).status_code == 302


def test_two_first_sign_ins_at_once_are_a_clean_refusal(browser, world, monkeypatch):
    from django.db import IntegrityError

    alpha = world[0]

    def taken(*args, **kwargs):
        raise IntegrityError("UNIQUE constraint failed: auth_user.username")

    monkeypatch.setattr(User.objects, "create_user", taken)
    alpha.idp.sign_in_next("u", email="u@alpha.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 409, "concurrent_sign_in")

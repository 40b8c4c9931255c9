"""Issue 35 items 3 and 10 with the fake IdP: claims of odd types in a signed id_token
(`exp: 1e400`, an `email` that is a list...) are refused like every other bad token (the
page, the audit row, no session), and an IdP that puts the e-mail and the groups at its
userinfo endpoint only (panva's oidc-provider's default) signs people in."""

from __future__ import annotations

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model

from licensing.models import AdminProfile, SsoIdentity
from licensing.signin import claims as claim_checks

from .conftest import sign_in
from .test_sign_in import assert_refused, refusals

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"exp": "1e400"}, "invalid_exp"),  # infinity: signs in and never expires
        ({"exp": "-1e400"}, "invalid_exp"),
        ({"exp": "NaN"}, "invalid_exp"),  # no comparison refuses it
        ({"exp": "Infinity"}, "invalid_exp"),
        ({"exp": str(10**30)}, "invalid_exp"),
        ({"exp": "4102444800"}, "invalid_exp"),  # 2100: a number, too far ahead
        ({"exp": '"4102444800"'}, "invalid_exp"),
        ({"exp": "true"}, "invalid_exp"),
        ({"exp": "[1]"}, "invalid_exp"),
        ({"exp": "null"}, "invalid_exp"),
        ({"iat": "1e400"}, "invalid_iat"),
        ({"iat": "NaN"}, "invalid_iat"),
        ({"iat": '"now"'}, "invalid_iat"),
        ({"iat": "false"}, "invalid_iat"),
        ({"nbf": "NaN"}, "invalid_nbf"),
        ({"nbf": '{"a": 1}'}, "invalid_nbf"),
        ({"nbf": "4102444800"}, "invalid_nbf"),  # not valid before 2100
        ({"email": '["a@alpha.example.edu", "b@alpha.example.edu"]'}, "invalid_email"),
        ({"email": '{"value": "a@alpha.example.edu"}'}, "invalid_email"),
        ({"email": "12"}, "invalid_email"),
        ({"email": "true"}, "invalid_email"),
        ({"email": '"no-at-sign"'}, "invalid_email"),
        ({"email": '"' + "a" * 250 + '@alpha.example.edu"'}, "invalid_email"),
        ({"email": '"a\\u0000@alpha.example.edu"'}, "invalid_email"),
        ({"sub": '["s"]'}, "invalid_sub"),
        ({"sub": "null"}, "invalid_sub"),
        ({"sub": '"' + "s" * 256 + '"'}, "invalid_sub"),
    ],
)
def test_odd_claims_are_refused_like_any_bad_token(browser, world, raw, reason, gateway_log):
    alpha = world[0]
    alpha.idp.sign_in_next("odd", email="odd@alpha.example.edu", groups=["alpha-admins"], raw=raw)
    response = sign_in(browser, alpha.provider)
    assert_refused(browser, response, 403, reason)
    assert b" claim " in response.content  # the page says which claim
    assert any(line.startswith(f"SSO sign-in refused ({reason})") for line in gateway_log)
    assert not SsoIdentity.objects.exists() and not User.objects.exists()


def test_sane_times_and_an_empty_email_still_sign_in(browser, world):
    alpha = world[0]
    now = int(alpha.idp.clock())
    alpha.idp.sign_in_next(
        "fine",
        groups=["alpha-admins"],
        raw={"exp": f"{now + 3600}.5", "nbf": str(now - 10), "email": '""'},
    )
    assert sign_in(browser, alpha.provider).status_code == 302
    assert User.objects.get().email == ""


def test_the_checks_directly():
    now = 1_800_000_000.0
    good = {"exp": now + 60, "iat": now}
    assert claim_checks.time_claims_problem(good, now=now) is None
    month = claim_checks.MAX_LIFETIME
    assert claim_checks.time_claims_problem({**good, "exp": now + month}, now=now) is None
    assert claim_checks.time_claims_problem({**good, "exp": now + month + 1}, now=now)[0] == (
        "invalid_exp"
    )
    assert claim_checks.time_claims_problem({"exp": now}, now=now)[0] == "invalid_iat"
    assert claim_checks.email_claim_problem({}) is None
    assert claim_checks.email_claim_problem({"email": None}) is None
    assert claim_checks.email_claim_problem({"email": ["x@y.z"]})[0] == "invalid_email"


# --- the claims at userinfo ---------------------------------------------------------------


def test_claims_at_userinfo_only_sign_in(browser, world):
    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    alpha.idp.sign_in_next("ui-1", email="Una@Alpha.example.edu", groups=["alpha-teachers"])
    response = sign_in(browser, alpha.provider)
    assert response.status_code == 302, response.content[:500]
    issued = alpha.idp.issued[-1]
    assert "email" not in issued and "groups" not in issued  # the id_token had neither
    user = User.objects.get(pk=browser.session[SESSION_KEY])
    assert (user.username, user.email) == ("una@alpha.example.edu", "una@alpha.example.edu")
    assert AdminProfile.objects.get(user=user).role == "teacher"
    identity = SsoIdentity.objects.get(user=user)
    assert (identity.subject, identity.groups) == ("ui-1", ["alpha-teachers"])
    asked = [r for r in alpha.idp.requests if r.path == "/userinfo"]
    assert len(asked) == 1 and asked[0].headers["authorization"].startswith("Bearer ")


def test_userinfo_is_not_asked_when_the_id_token_has_the_claims(browser, world):
    alpha = world[0]
    alpha.idp.sign_in_next("ui-2", email="ui2@alpha.example.edu", groups=["alpha-admins"])
    assert sign_in(browser, alpha.provider).status_code == 302
    assert not [r for r in alpha.idp.requests if r.path == "/userinfo"]


def test_the_id_token_wins_over_userinfo(browser, world):
    """Only missing claims come from userinfo: the signed id_token's groups stay."""
    alpha = world[0]
    alpha.idp.sign_in_next("ui-3", groups=["alpha-admins"])  # no e-mail: userinfo is asked
    alpha.idp._next[-1].extra["groups"] = ["alpha-reviewers"]  # what the id_token says
    assert sign_in(browser, alpha.provider).status_code == 302
    assert [r.path for r in alpha.idp.requests].count("/userinfo") == 1
    assert alpha.idp.issued[-1]["groups"] == ["alpha-reviewers"]
    assert AdminProfile.objects.get().role == "reviewer"  # not userinfo's admin


def test_userinfo_about_another_subject_is_refused(browser, world):
    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    alpha.idp.failure = "userinfo_wrong_sub"
    alpha.idp.sign_in_next("ui-4", email="ui4@alpha.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "userinfo_wrong_sub")
    assert not User.objects.exists()


@pytest.mark.parametrize(
    ("failure", "status", "reason"),
    [("userinfo_down", 403, "userinfo_refused"), ("userinfo_huge", 502, "idp_unavailable")],
)
def test_userinfo_failures_are_clean_refusals(browser, world, failure, status, reason):
    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    alpha.idp.failure = failure
    alpha.idp.sign_in_next("ui-5", email="ui5@alpha.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), status, reason)


def test_a_list_email_at_userinfo_is_refused(browser, world):
    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    alpha.idp.sign_in_next("ui-6", email=["a@alpha.example.edu"], groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "invalid_email")
    assert refusals() == ["invalid_email"]


def test_no_userinfo_endpoint_leaves_the_claims_as_they_are(browser, world, monkeypatch):
    from licensing.signin import oidc

    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    metadata = oidc.discovery_cache.metadata_for(alpha.idp.issuer)
    bare = oidc.Metadata(**{**metadata.__dict__, "userinfo_endpoint": None})
    monkeypatch.setattr(oidc.discovery_cache, "metadata_for", lambda issuer: bare)
    alpha.idp.sign_in_next("ui-7", email="ui7@alpha.example.edu", groups=["alpha-admins"])
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "no_mapped_group")
    assert not [r for r in alpha.idp.requests if r.path == "/userinfo"]


def test_an_email_from_userinfo_is_verified_by_userinfo(browser, world):
    """`email_verified` comes with the address from the same answer."""
    alpha = world[0]
    alpha.idp.claims_at = "userinfo"
    alpha.idp.sign_in_next(
        "ui-8", email="ui8@alpha.example.edu", email_verified=False, groups=["alpha-admins"]
    )
    assert_refused(browser, sign_in(browser, alpha.provider), 403, "email_not_verified")

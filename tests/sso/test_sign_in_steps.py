"""The steps of an SSO sign-in, one by one without an IdP: the callback's checks
(licensing/signin/sso_views.py), the id_token's (licensing/signin/oidc.py), what a verified
token's holder may do (licensing/signin/sso.py), and the provider's configuration (the service,
the admin form, configure_sso). Each refusal has its own reason and message, in the order the
whole flow meets them; the flow end to end is tests/sso/test_sign_in.py."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from licensing.management.commands import configure_sso
from licensing.models import IdentityProvider
from licensing.signin import oidc, sso, sso_views
from licensing.signin.admin_sso import IdentityProviderForm
from licensing.signin.oidc import OidcError
from licensing.signin.sso_views import CallbackProblem, callback_problem, landing_of

NOW = 1_800_000_000.0


# --- the callback -------------------------------------------------------------------------------


def pending(**override):
    value = {"provider": 7, "state": "st-1", "nonce": "n-1", "verifier": "v", "created": NOW}
    value.update(override)
    return value


def answer(**override):
    params = {"state": "st-1", "code": "c-1"}
    params.update(override)
    return {k: v for k, v in params.items() if v is not None}


NO_PENDING = CallbackProblem(
    "no_pending_login",
    "This sign-in was not started here, or was finished already. "
    "Start again from the sign-in page.",
)
EXPIRED = CallbackProblem("login_expired", "This sign-in took longer than 10 minutes. Start again.")
STATE = CallbackProblem(
    "state_mismatch", "The answer of the identity provider does not belong to this sign-in."
)
NO_CODE = CallbackProblem("no_code", "The identity provider's answer holds no authorization code.")


@pytest.mark.parametrize(
    ("pending_", "params", "now", "problem"),
    [
        (None, answer(), NOW, NO_PENDING),
        ("st-1", answer(), NOW, NO_PENDING),
        (pending(provider=8), answer(), NOW, NO_PENDING),
        (pending(), answer(), NOW + sso_views.PENDING_LIFETIME + 1, EXPIRED),
        (pending(), answer(), NOW - 1, EXPIRED),  # created in the future: a clock gone back
        (pending(), answer(), NOW, None),
        (pending(), answer(state=None), NOW, STATE),
        (pending(), answer(state="st-2"), NOW, STATE),
        (pending(), answer(state="st-1" + "x" * sso_views.MAX_PARAM), NOW, STATE),
        (pending(), answer(state="\ud800"), NOW, STATE),
        (pending(), answer(code="c\x00"), NOW, NO_CODE),
        (pending(), answer(code=None), NOW, NO_CODE),
        (pending(), answer(code="c" * (sso_views.MAX_PARAM + 1)), NOW, NO_CODE),
        (pending(), answer(), NOW + sso_views.PENDING_LIFETIME, None),
    ],
)
def test_the_callback_checks(pending_, params, now, problem):
    assert callback_problem(pending_, 7, params, now=now) == problem


def test_the_callback_checks_the_pending_login_before_the_answer():
    # A stranger's answer to no sign-in of this browser: the state is never looked at.
    assert callback_problem(None, 7, answer(state="forged"), now=NOW) == NO_PENDING
    assert callback_problem(pending(), 7, answer(state="forged", error="x"), now=NOW) == STATE


def test_the_idps_error_is_told_after_the_state_matched():
    problem = callback_problem(
        pending(), 7, answer(code=None, error="access_denied\x00" + "x" * 200), now=NOW
    )
    assert problem == CallbackProblem(
        "idp_error",
        "The identity provider refused the sign-in (access_denied" + "x" * 86 + ").",
        status=403,
    )


@pytest.mark.parametrize(
    ("next_", "staff", "target"),
    [
        ("", True, "/admin/"),
        ("", False, "/portal/"),
        ("/admin/licensing/", True, "/admin/licensing/"),
        ("/admin/licensing/", False, "/portal/"),
        ("/portal/keys/", False, "/portal/keys/"),
        ("/portal/keys/", True, "/portal/keys/"),
    ],
)
def test_the_landing_page(next_, staff, target):
    assert landing_of(pending(next=next_), staff=staff) == target


# --- the id_token -------------------------------------------------------------------------------


METADATA = oidc.Metadata(
    issuer="https://idp.example",
    authorization_endpoint="https://idp.example/auth",
    token_endpoint="https://idp.example/token",
    jwks_uri="https://idp.example/jwks",
    token_auth_methods=("client_secret_basic",),
)


@pytest.mark.parametrize(
    ("id_token", "message"),
    [
        ("a.b", "The id_token is not a signed JWT"),
        ("a" * oidc.MAX_TOKEN_LENGTH + "..", "The id_token is not a signed JWT"),
        ("!!!.b.c", "The id_token is not a signed JWT"),
        ("WzFd.b.c", "The id_token is not a signed JWT"),  # [1]: no object
        ("eyJhbGciOiJub25lIn0.b.c", "The id_token's algorithm is not RS256 or ES256"),  # none
        ("eyJhbGciOiJIUzI1NiJ9.b.c", "The id_token's algorithm is not RS256 or ES256"),  # HS256
    ],
)
def test_the_header_step_refuses(id_token, message):
    with pytest.raises(OidcError) as caught:
        oidc._id_token_header(id_token)
    assert (caught.value.reason, caught.value.message) == ("invalid_token", message)


class Keys:
    def __init__(self, keys):
        self.keys = keys

    def keys_for(self, url, kid):
        assert url == METADATA.jwks_uri
        return self.keys


@pytest.fixture(scope="module")
def signer():
    return RSAKey.generate_key(2048, parameters={"kid": "k1"})


def signed(key, claims=None) -> str:
    alg = "ES256" if isinstance(key, ECKey) else "RS256"
    return jwt.encode({"alg": alg, "kid": "k1"}, claims or {"sub": "s-1"}, key)


def test_the_signature_step_tries_each_key(monkeypatch, signer):
    rogue = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    other_type = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    monkeypatch.setattr(oidc, "jwks_cache", Keys([rogue, other_type, signer]))
    token = oidc._id_token_signed(signed(signer), {"kid": "k1"}, METADATA)
    assert token.claims == {"sub": "s-1"}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([], "No key of the IdP's JWKS matches the id_token"),
        (["rogue"], "The id_token's signature does not verify"),
        (["rogue", "rogue"], "The id_token's signature does not verify"),
    ],
)
def test_the_signature_step_refuses(monkeypatch, signer, keys, message):
    rogue = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    monkeypatch.setattr(oidc, "jwks_cache", Keys([rogue for _ in keys]))
    with pytest.raises(OidcError) as caught:
        oidc._id_token_signed(signed(signer), {"kid": "k1"}, METADATA)
    assert (caught.value.reason, caught.value.message) == ("bad_signature", message)


def claims_of(**override):
    claims = {
        "iss": METADATA.issuer,
        "aud": "gw",
        "sub": "s-1",
        "exp": int(NOW) + 300,
        "iat": int(NOW),
        "nonce": "n-1",
    }
    claims.update(override)
    return SimpleNamespace(
        claims={k: v for k, v in claims.items() if v is not None}, header={"alg": "RS256"}
    )


def validated(token, now=NOW):
    return oidc._validated_claims(
        token, metadata=METADATA, client_id="gw", nonce="n-1", access_token=None, now=now
    )


@pytest.mark.parametrize(
    ("token", "now", "reason", "message"),
    [
        (claims_of(), NOW + 400, "expired", "The id_token has expired"),
        (
            claims_of(iss="https://evil"),
            NOW,
            "invalid_iss",
            "The id_token's 'iss' claim is not acceptable",
        ),
        (
            claims_of(aud="other"),
            NOW,
            "wrong_audience",
            "The id_token's 'aud' claim is not acceptable",
        ),
        (
            claims_of(aud=["gw", "other"], azp="other"),
            NOW,
            "wrong_audience",
            "The id_token's 'azp' claim is not acceptable",
        ),
        (
            claims_of(nonce="n-2"),
            NOW,
            "wrong_nonce",
            "The id_token's 'nonce' claim is not acceptable",
        ),
        (
            claims_of(nonce=None),
            NOW,
            "wrong_nonce",
            "The id_token's 'nonce' claim is not acceptable",
        ),
        (claims_of(sub=None), NOW, "invalid_sub", "The id_token's 'sub' claim is not acceptable"),
    ],
)
def test_the_claims_step_refuses(token, now, reason, message):
    with pytest.raises(OidcError) as caught:
        validated(token, now)
    assert (caught.value.reason, caught.value.message) == (reason, message)


def test_the_claims_step_takes_good_claims():
    assert validated(claims_of())["sub"] == "s-1"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"iat": True, "sub": "s"}, "invalid_iat"),
        ({"iat": "1", "sub": "s"}, "invalid_iat"),
        ({"iat": 1, "sub": 7}, "invalid_sub"),
        ({"iat": 1, "sub": ""}, "invalid_sub"),
        ({"iat": 1, "sub": "s" * 256}, "invalid_sub"),
        ({"iat": 1, "sub": "s\x00"}, "invalid_sub"),
        ({"iat": 1.5, "sub": "s" * 255}, None),
    ],
)
def test_the_iat_and_sub_step(claims, reason):
    if reason is None:
        oidc._check_iat_and_sub(claims)
        return
    with pytest.raises(OidcError) as caught:
        oidc._check_iat_and_sub(claims)
    assert caught.value.reason == reason


def test_verify_id_token_runs_the_steps_in_order(monkeypatch, signer):
    monkeypatch.setattr(oidc, "jwks_cache", Keys([signer]))
    good = claims_of().claims
    token = signed(signer, good | {"email": ["a@b.c"], "exp": int(NOW) - 400})
    with pytest.raises(OidcError) as caught:  # odd claims are told before authlib's rules
        oidc.verify_id_token(token, metadata=METADATA, client_id="gw", nonce="n-1", now=NOW)
    assert caught.value.reason == "invalid_email"
    claims = oidc.verify_id_token(
        signed(signer, good), metadata=METADATA, client_id="gw", nonce="n-1", now=NOW
    )
    assert claims == good


# --- the holder of a verified token -------------------------------------------------------------


@pytest.fixture
def provider(db):
    from licensing.access.services import license_create

    license = license_create(name="Alpha", institution="Alpha School", strategy="per_user")
    return IdentityProvider(institution=license.institution, pk=1)


@pytest.mark.parametrize(
    ("claims", "refused"),
    [
        ({}, False),
        ({"email": ""}, False),
        ({"email": "a@alpha.example"}, True),
        ({"email": "a@alpha.example", "email_verified": "true"}, True),
        ({"email": "a@alpha.example", "email_verified": True}, False),
        ({"email": "a@alpha.example", "xms_edov": True}, False),
    ],
)
def test_the_email_step(provider, claims, refused):
    refusal = sso._email_refusal(provider, claims)
    if not refused:
        assert refusal is None
        return
    assert refusal is not None
    assert (refusal.reason, refusal.message, refusal.status) == (
        "email_not_verified",
        "Your identity provider says your e-mail address is not verified.",
        403,
    )


def test_the_user_step(provider, django_user_model):
    from licensing.access.services import license_create
    from licensing.models import AdminProfile

    user = django_user_model.objects.create_user("u1", email="u1@alpha.example")
    assert sso._user_refusal(provider, user) is None
    user.is_active = False
    assert sso._user_refusal(provider, user).reason == "user_inactive"
    user.is_active, user.is_superuser = True, True
    assert sso._user_refusal(provider, user).reason == "role_in_other_institution"
    user.is_superuser = False
    other = license_create(name="Beta", institution="Beta College", strategy="per_user")
    AdminProfile.objects.create(
        user=user, institution=other.institution, role=AdminProfile.Role.ADMIN
    )
    refusal = sso._user_refusal(provider, user)
    assert (refusal.reason, refusal.message) == (
        "role_in_other_institution",
        "This account holds a role in another institution.",
    )


# --- the configuration --------------------------------------------------------------------------


def test_the_mapped_groups_step():
    mapped = sso._mapped_groups(None, ["a", "a", "b"], None, ("t",), [])
    assert mapped == {
        "admin_groups": ["a", "b"],
        "reviewer_groups": [],
        "teacher_groups": ["t"],
        "student_groups": [],
    }
    with pytest.raises(ValidationError, match="Student groups need a student license"):
        sso._mapped_groups(None, None, None, None, ["s"])
    with pytest.raises(ValidationError, match="reviewer groups: a list of group names"):
        sso._mapped_groups(None, None, "staff", None, None)


def test_the_client_secret_step():
    provider = IdentityProvider(client_secret="old", client_secret_env="")
    sso._client_secret_set(provider, None, None, created=False)
    assert (provider.client_secret, provider.client_secret_env) == ("old", "")
    sso._client_secret_set(provider, None, "GW_SECRET", created=False)
    assert (provider.client_secret, provider.client_secret_env) == ("", "GW_SECRET")
    sso._client_secret_set(provider, " new ", None, created=False)
    assert (provider.client_secret, provider.client_secret_env) == ("new", "")


@pytest.mark.parametrize(
    ("secret", "env", "created", "error"),
    [
        ("s", "GW_SECRET", False, "Give the client secret or its environment variable, not both"),
        (None, None, True, "A new provider needs a client secret or its environment variable"),
        (" ", None, False, "The client secret is required"),
        (None, "1ST", False, "Not an environment variable name: '1ST'"),
        (None, "GW-SECRET", False, "Not an environment variable name"),
        (None, "GW_SÉCRET", False, "Not an environment variable name"),
    ],
)
def test_the_client_secret_step_refuses(secret, env, created, error):
    with pytest.raises(ValidationError, match=error):
        sso._client_secret_set(IdentityProvider(), secret, env, created=created)


def options(**override):
    value = {"client_secret": None, "client_secret_env": None}
    value.update(override)
    return value


def test_the_commands_secret_step(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\r\n"))
    assert configure_sso._client_secret(options(client_secret="-"), None) == "s3cret"
    assert configure_sso._client_secret(options(client_secret_env="GW"), None) is None
    assert configure_sso._client_secret(options(), IdentityProvider()) is None


@pytest.mark.parametrize(
    ("opts", "stdin", "error"),
    [
        (options(client_secret="s3cret"), "", "--client-secret takes '-'"),
        (options(client_secret="-"), "\n", "No client secret on stdin"),
        (options(), "", "A new provider needs --client-secret - or --client-secret-env"),
    ],
)
def test_the_commands_secret_step_refuses(monkeypatch, opts, stdin, error):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(CommandError, match=error):
        configure_sso._client_secret(opts, None)


def test_the_commands_license_step(provider):
    from licensing.models import License

    institution = provider.institution
    alpha = License.objects.get(name="Alpha")
    stored = IdentityProvider(institution=institution, student_license=alpha)
    assert configure_sso._student_license("Alpha", institution, None) == alpha
    assert configure_sso._student_license(None, institution, stored) == alpha
    assert configure_sso._student_license(None, institution, None) is None
    with pytest.raises(CommandError, match="No license named 'Beta' in 'Alpha School'"):
        configure_sso._student_license("Beta", institution, stored)


def test_the_commands_institution_step(provider):
    assert configure_sso._institution("Alpha School") == provider.institution
    with pytest.raises(
        CommandError, match=r"No institution named 'Gamma'; known: \['Alpha School'\]"
    ):
        configure_sso._institution("Gamma")


class FormSelf(SimpleNamespace):
    """The parts of IdentityProviderForm its clean steps use: errors by field."""

    def add_error(self, field, error):
        self.errors.setdefault(field, []).append(str(error))


def form_self(pk=None, institution=None):
    return FormSelf(errors={}, instance=SimpleNamespace(pk=pk, institution=institution))


def test_the_admin_forms_list_step():
    form = form_self()
    cleaned = {"admin_groups": ["a", "a"], "teacher_groups": "t", "email_domains": "@X.edu, y.org"}
    IdentityProviderForm._clean_lists(form, cleaned)
    assert cleaned["admin_groups"] == ["a"] and cleaned["reviewer_groups"] == []
    assert cleaned["email_domains"] == "x.edu,y.org"
    assert list(form.errors) == ["teacher_groups"]
    IdentityProviderForm._clean_lists(form, {"email_domains": "not a domain"})
    assert "email_domains" in form.errors


def test_the_admin_forms_license_step():
    alpha = SimpleNamespace(pk=1)
    form = form_self(pk=3, institution=alpha)
    IdentityProviderForm._clean_license(
        form, {"student_license": SimpleNamespace(institution_id=1)}
    )
    assert form.errors == {}
    IdentityProviderForm._clean_license(
        form, {"student_license": SimpleNamespace(institution_id=2)}
    )
    assert form.errors == {"student_license": ["This license belongs to another institution."]}
    form = form_self()
    IdentityProviderForm._clean_license(form, {"student_groups": ["s"], "student_license": None})
    assert form.errors == {"student_license": ["Student groups need a student license."]}

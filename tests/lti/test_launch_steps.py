"""The steps of the LTI id_token check and of the platform's registration
(licensing/signin/lti.py), one by one without a server: each check refuses with its own
reason, message and status, in the order verify_launch_token runs them. The whole launch, with
a platform that signs, is tests/lti/test_launch.py."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.core.exceptions import ValidationError

from licensing.signin import lti
from licensing.signin.lti import LtiError

NOW = 1_800_000_000.0
PLATFORM = SimpleNamespace(
    issuer="https://lms.example.edu",
    client_id="gw-tool",
    jwks_url="https://lms.example.edu/jwks",
    deployment_ids=["dep-1"],
)


def refusal(step, *args) -> tuple[str, str, int]:
    with pytest.raises(LtiError) as caught:
        step(*args)
    return caught.value.reason, caught.value.message, caught.value.status


def segment(document) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()


# --- the header ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "reason", "message", "status"),
    [
        (None, "no_id_token", "The launch holds no id_token.", 400),
        ("", "no_id_token", "The launch holds no id_token.", 400),
        (["a.b.c"], "no_id_token", "The launch holds no id_token.", 400),
        ("a.b", "invalid_token", "The id_token is not a signed JWT.", 400),
        (
            "a" * lti.MAX_TOKEN_LENGTH + "..",
            "invalid_token",
            "The id_token is not a signed JWT.",
            400,
        ),
        ("é.b.c", "invalid_token", "The id_token is not a signed JWT.", 400),
        ("!!!.b.c", "invalid_token", "The id_token is not a signed JWT.", 400),
        (segment([1]) + ".b.c", "invalid_token", "The id_token is not a signed JWT.", 400),
        (
            segment({"alg": "none"}) + ".b.c",
            "invalid_token",
            "The id_token's algorithm is not RS256 or ES256.",
            403,
        ),
        (
            segment({"alg": "HS256"}) + ".b.c",
            "invalid_token",
            "The id_token's algorithm is not RS256 or ES256.",
            403,
        ),
    ],
)
def test_the_header_step_refuses_what_is_no_signed_jwt(token, reason, message, status):
    assert refusal(lti._launch_token_header, token) == (reason, message, status)


def test_the_header_step_gives_the_header_of_a_signed_jwt():
    token = segment({"alg": "ES256", "kid": "k1"}) + ".b.c"
    assert lti._launch_token_header(token) == {"alg": "ES256", "kid": "k1"}


# --- the signature ------------------------------------------------------------------------------


class Keys:
    def __init__(self, keys):
        self.keys = keys
        self.asked: list[tuple[str, object]] = []

    def keys_for(self, url, kid):
        self.asked.append((url, kid))
        return self.keys


def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def signer():
    return rsa_key()


@pytest.fixture(scope="module")
def stranger():
    return rsa_key()


def signed(key, **override) -> str:
    claims = {
        "iss": PLATFORM.issuer,
        "aud": PLATFORM.client_id,
        "sub": "s-1",
        "exp": NOW + 300,
        "iat": NOW,
        "nonce": "n-1",
    }
    claims.update(override)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


def test_the_signature_step_tries_each_key_of_the_kid(monkeypatch, signer, stranger):
    wrong_type = ec.generate_private_key(ec.SECP256R1()).public_key()
    keys = Keys([stranger.public_key(), wrong_type, signer.public_key()])
    monkeypatch.setattr(lti, "jwks_cache", keys)
    token = signed(signer)
    claims = lti._launch_token_decoded(token, {"alg": "RS256", "kid": "k1"}, PLATFORM)
    assert claims["sub"] == "s-1"
    assert keys.asked == [(PLATFORM.jwks_url, "k1")]


@pytest.mark.parametrize(
    ("keys", "override", "reason", "message"),
    [
        ([], {}, "bad_signature", "No key of the platform's JWKS matches the id_token."),
        (["stranger"], {}, "bad_signature", "The id_token's signature does not verify."),
        (["ec"], {}, "bad_signature", "The id_token's signature does not verify."),
        (["ec", "stranger"], {}, "bad_signature", "The id_token's signature does not verify."),
        (
            ["signer"],
            {"aud": "another-tool"},
            "wrong_audience",
            "The id_token is meant for another tool.",
        ),
        (
            ["signer"],
            {"iss": "https://evil.example"},
            "wrong_issuer",
            "The id_token's issuer is not this platform.",
        ),
        (["signer"], {"nonce": None}, "missing_claim", "The id_token has no 'nonce' claim."),
    ],
)
def test_the_signature_step_refuses(monkeypatch, signer, stranger, keys, override, reason, message):
    named = {
        "signer": signer.public_key(),
        "stranger": stranger.public_key(),
        "ec": ec.generate_private_key(ec.SECP256R1()).public_key(),  # PyJWT: a TypeError
    }
    monkeypatch.setattr(lti, "jwks_cache", Keys([named[k] for k in keys]))
    token = signed(signer, **override)
    header = {"alg": "RS256", "kid": "k1"}
    assert refusal(lti._launch_token_decoded, token, header, PLATFORM) == (reason, message, 403)


def test_a_claims_error_is_not_retried_with_the_next_key(monkeypatch, signer):
    # The signature verified with the first key: the audience is wrong whatever the key.
    keys = Keys([signer.public_key(), signer.public_key()])
    monkeypatch.setattr(lti, "jwks_cache", keys)
    token = signed(signer, aud="another-tool")
    reason, _, _ = refusal(lti._launch_token_decoded, token, {"alg": "RS256"}, PLATFORM)
    assert reason == "wrong_audience"


# --- the times ----------------------------------------------------------------------------------


def times(**override):
    claims = {"exp": NOW + 300, "iat": NOW}
    claims.update(override)
    return claims


@pytest.mark.parametrize(
    ("claims", "reason", "message"),
    [
        (
            times(exp=float("nan")),
            "invalid_exp",
            "The token's 'exp' claim is not a time (a number)",
        ),
        (times(iat="0"), "invalid_iat", "The token's 'iat' claim is not a time (a number)"),
        (
            times(email=["a@b.c"]),
            "invalid_email",
            "The token's 'email' claim is not an e-mail address",
        ),
        (times(exp=NOW - lti.LEEWAY - 1), "expired", "The id_token has expired."),
        (times(iat=NOW + lti.LEEWAY + 1), "invalid_iat", "The id_token was issued in the future."),
        (times(nbf=NOW + lti.LEEWAY + 1), "invalid_nbf", "The id_token is not valid yet."),
    ],
)
def test_the_times_step_refuses(claims, reason, message):
    assert refusal(lti._check_launch_times, claims, NOW) == (reason, message, 403)


def test_the_times_step_allows_the_leeway():
    lti._check_launch_times(
        times(exp=NOW - lti.LEEWAY, iat=NOW + lti.LEEWAY, nbf=NOW + lti.LEEWAY), NOW
    )


# --- azp ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("aud", "azp", "refused"),
    [
        ("gw-tool", None, False),
        (["gw-tool"], None, False),
        (["gw-tool", "other"], None, True),
        (["gw-tool", "other"], "gw-tool", False),
        ("gw-tool", "other", True),
        ("gw-tool", "gw-tool", False),
    ],
)
def test_the_azp_step(aud, azp, refused):
    claims = {"aud": aud} | ({"azp": azp} if azp is not None else {})
    if refused:
        assert refusal(lti._check_launch_azp, claims, PLATFORM) == (
            "wrong_audience",
            "The id_token's azp is not this tool.",
            403,
        )
    else:
        lti._check_launch_azp(claims, PLATFORM)


# --- the nonce ----------------------------------------------------------------------------------


def test_the_nonce_step_takes_this_launchs_nonce():
    lti._check_launch_nonce({"nonce": "n-1"}, SimpleNamespace(nonce="n-1", pk=1))


@pytest.mark.django_db
# A nonce no column holds (a lone surrogate, a NUL) is refused before the replay query, which
# it would break (SQLite: UnicodeEncodeError; PostgreSQL: NUL refused): a 500, not a refusal.
@pytest.mark.parametrize("nonce", ["n-2", 7, None, "n-1 ", "\ud800", "n-1\x00"])
def test_the_nonce_step_refuses_another_nonce(nonce):
    launch = SimpleNamespace(nonce="n-1", pk=1)
    assert refusal(lti._check_launch_nonce, {"nonce": nonce}, launch) == (
        "wrong_nonce",
        "The id_token's nonce is not this launch's.",
        403,
    )


@pytest.mark.django_db
def test_the_nonce_step_tells_a_replay_apart(monkeypatch):
    from core import outbound

    monkeypatch.setattr(outbound, "getaddrinfo_sync", lambda host, port: ["93.184.215.14"])
    from licensing.access.services import license_create
    from licensing.models import LtiLaunchState, LtiPlatform

    license = license_create(
        name="Alpha courses", institution="Alpha School", limit=10**6, strategy="per_user"
    )
    platform = LtiPlatform.objects.create(
        institution=license.institution,
        issuer=PLATFORM.issuer,
        client_id=PLATFORM.client_id,
        deployment_ids=["dep-1"],
        jwks_url=PLATFORM.jwks_url,
        auth_login_url="https://lms.example.edu/auth",
        license=license,
    )
    LtiLaunchState.objects.create(
        platform=platform, state="s-old", nonce="n-old", created_at=lti._now(), used_at=lti._now()
    )
    launch = LtiLaunchState.objects.create(
        platform=platform, state="s-new", nonce="n-new", created_at=lti._now()
    )
    assert refusal(lti._check_launch_nonce, {"nonce": "n-old"}, launch)[:2] == (
        "nonce_replayed",
        "This id_token was used already (replayed).",
    )
    # A nonce of a launch not used yet is no replay: only another launch's.
    LtiLaunchState.objects.create(
        platform=platform, state="s-pending", nonce="n-pending", created_at=lti._now()
    )
    assert refusal(lti._check_launch_nonce, {"nonce": "n-pending"}, launch)[0] == "wrong_nonce"


# --- the message --------------------------------------------------------------------------------


def message(**override):
    claims = {
        lti.CLAIM + "deployment_id": "dep-1",
        lti.CLAIM + "message_type": lti.MESSAGE_TYPE,
        lti.CLAIM + "version": lti.VERSION,
    }
    claims.update({lti.CLAIM + k: v for k, v in override.items()})
    return claims


@pytest.mark.parametrize(
    ("claims", "reason", "message_", "status"),
    [
        (
            message(deployment_id="dep-2"),
            "unknown_deployment",
            "This deployment of the tool is not registered on the gateway.",
            403,
        ),
        (
            message(deployment_id=["dep-1"]),
            "unknown_deployment",
            "This deployment of the tool is not registered on the gateway.",
            403,
        ),
        (
            message(message_type="LtiDeepLinkingRequest"),
            "unsupported_message",
            "Only resource link launches are supported.",
            400,
        ),
        (
            message(version="1.1"),
            "unsupported_version",
            "Only LTI 1.3.0 launches are supported.",
            400,
        ),
    ],
)
def test_the_message_step_refuses(claims, reason, message_, status):
    assert refusal(lti._check_launch_message, claims, PLATFORM) == (reason, message_, status)


def test_the_message_step_takes_a_resource_link_launch():
    lti._check_launch_message(message(), PLATFORM)


# --- the registration's checks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        ([], "Give at least one deployment id"),
        (["ok", " "], "A deployment id is required"),
        ([f"d{n}" for n in range(101)], "At most 100 deployment ids"),
    ],
)
def test_the_deployment_ids_step_refuses(ids, error):
    with pytest.raises(ValidationError, match=error):
        lti._deployment_ids(ids)


def test_the_deployment_ids_step_strips_them():
    assert lti._deployment_ids([" a ", "b"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("allowance", "period", "error"),
    [
        (-1, "week", "The allowance is a whole number of micro-credits, 0 or more"),
        (True, "week", "The allowance is a whole number of micro-credits, 0 or more"),
        (1.5, "week", "The allowance is a whole number of micro-credits, 0 or more"),
        (lti.MAX_ALLOWANCE + 1, "week", "The allowance is at most"),
        (None, "fortnight", "The allowance period is one of"),
    ],
)
def test_the_allowance_step_refuses(allowance, period, error):
    with pytest.raises(ValidationError, match=error):
        lti._check_allowance(allowance, period)


@pytest.mark.parametrize(("allowance", "period"), [(None, "week"), (0, "day"), (10**9, "month")])
def test_the_allowance_step_takes(allowance, period):
    lti._check_allowance(allowance, period)

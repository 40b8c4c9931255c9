"""licensing.access.credentials' JWT steps without a database: a token's claims once a key of
its issuer verifies them, and the course a signed claim names."""

from __future__ import annotations

import time
from dataclasses import replace

import jwt
import pytest

from licensing.access import credentials
from licensing.access.credentials import _claimed_course, _IssuerInfo, _verified_claims

SECRET = "s" * 32
ISSUER = _IssuerInfo(
    id=1,
    license_id=2,
    issuer="https://idp.example.edu",
    audience="inference-gateway",
    algorithms=("HS256",),
    jwks_url="",
    public_keys=(),
    hs256_secret=SECRET,
    active=True,
    course_claim="course",
)


def _token(secret=SECRET, **claims):
    now = int(time.time())
    claims = {"iss": ISSUER.issuer, "aud": ISSUER.audience, "sub": "s1", "exp": now + 60, **claims}
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, secret, "HS256")


def test_a_token_signed_by_the_issuer_gives_its_claims():
    claims = _verified_claims(_token(course="bio"), ISSUER, {"alg": "HS256"}, "HS256")
    assert claims is not None and (claims["sub"], claims["course"]) == ("s1", "bio")


@pytest.mark.parametrize(
    "token",
    [
        _token(secret="t" * 32),  # another key
        _token(aud="another"),
        _token(sub=None),  # a required claim missing
        _token(exp=int(time.time()) - 3600),
    ],
)
def test_a_token_no_key_verifies_gives_none(token):
    assert _verified_claims(token, ISSUER, {"alg": "HS256"}, "HS256") is None


def test_without_the_course_claim_the_token_is_for_no_course():
    assert _claimed_course(ISSUER, {"sub": "s1"}) == (True, None)
    no_claim = replace(ISSUER, course_claim="")
    assert _claimed_course(no_claim, {"course": "bio"}) == (True, None)


@pytest.mark.parametrize("code", ["", 7, "bio\x00", "x" * 500])
def test_a_course_claim_no_column_takes_is_unknown_without_a_query(monkeypatch, code):
    monkeypatch.setattr(credentials, "_course_id", _no_query)
    assert _claimed_course(ISSUER, {"course": code}) == (False, None)


def test_a_course_claim_is_known_only_as_a_course_of_the_license(monkeypatch):
    courses = {(2, "bio"): 11}
    monkeypatch.setattr(
        credentials, "_course_id", lambda issuer, code: courses.get((issuer.license_id, code))
    )
    assert _claimed_course(ISSUER, {"course": "bio"}) == (True, 11)
    assert _claimed_course(ISSUER, {"course": "chem"}) == (False, None)


def _no_query(issuer, code):
    raise AssertionError("looked up")

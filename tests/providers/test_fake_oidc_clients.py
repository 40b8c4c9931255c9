"""The fake OpenID provider with more than one application registered (`more_clients`: the
gateway and Open WebUI at one school's IdP, tests/clients/test_open_webui.py): each code is bound
to the client that asked for it, and its id_token is for that client."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt

from fake_upstreams.oidc import OidcFake
from fake_upstreams.server import serve

VERIFIER = "v" * 64
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=")
REDIRECT = "http://127.0.0.1:9/callback"


@pytest.fixture(scope="module")
def idp():
    with serve(OidcFake("gateway", "gw-secret", more_clients={"open-webui": "ow-secret"})) as fake:
        yield fake


def authorize(idp, client_id: str) -> httpx.Response:
    idp.sign_in_next("stu-1", email="stu@school.example")
    query = {
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "response_type": "code",
        "scope": "openid email",
        "code_challenge": CHALLENGE.decode(),
        "code_challenge_method": "S256",
        "state": "s",
    }
    return httpx.get(f"{idp.issuer}/authorize", params=query, timeout=10)


def code_of(answer: httpx.Response) -> str:
    assert answer.status_code == 302, answer.text
    return parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]


def redeem(idp, code: str, client: tuple[str, str]) -> httpx.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "code_verifier": VERIFIER,
    }
    return httpx.post(f"{idp.issuer}/token", data=form, auth=client, timeout=10)


@pytest.mark.parametrize("client", [("gateway", "gw-secret"), ("open-webui", "ow-secret")])
def test_each_client_gets_an_id_token_for_itself(idp, client):
    answer = redeem(idp, code_of(authorize(idp, client[0])), client)
    assert answer.status_code == 200, answer.text
    claims = jwt.decode(answer.json()["id_token"], idp.rsa).claims
    assert (claims["aud"], claims["sub"]) == (client[0], "stu-1")


def test_a_code_is_redeemed_only_by_the_client_it_was_given_to(idp):
    code = code_of(authorize(idp, "open-webui"))
    answer = redeem(idp, code, ("gateway", "gw-secret"))
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"
    assert redeem(idp, code, ("open-webui", "ow-secret")).status_code == 400  # used up


def test_unknown_clients_and_wrong_secrets_are_refused(idp):
    assert authorize(idp, "elsewhere").status_code == 400
    code = code_of(authorize(idp, "open-webui"))
    assert redeem(idp, code, ("open-webui", "gw-secret")).status_code == 401

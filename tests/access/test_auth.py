"""Authentication (spec: Authentication): every 401 case, API key and JWT states."""

from __future__ import annotations

import time
from datetime import timedelta

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.utils import timezone

from licensing.models import EndUser, Institution, JwtIssuer

pytestmark = pytest.mark.django_db(transaction=True)

HS_SECRET = "a-test-secret-that-is-long-enough-for-hs256"
ISSUER = "https://idp.example.edu"
AUDIENCE = "inference-gateway"


def get_models(client, header=None):
    headers = {} if header is None else {"Authorization": header}
    return client.get("/v1/models", headers=headers)


def assert_401(response, message):
    assert response.status_code == 401, response.text
    assert response.json() == {"error": {"message": message}}


def test_missing_header_is_authentication_required(client):
    assert_401(get_models(client), "Authentication required")


def test_empty_header_counts_as_missing(client):
    assert_401(get_models(client, ""), "Authentication required")


@pytest.mark.parametrize(
    "header", ["bearer {key}", "BEARER {key}", "Basic {key}", "Token {key}", "Bearer", "{key}"]
)
def test_wrong_scheme(client, api_key, header):
    response = get_models(client, header.format(key=api_key))
    assert_401(response, "Authorization header must use the Bearer scheme")


@pytest.mark.parametrize(
    "credential",
    [
        " {key}",
        "{key}x",
        "sk-svc-" + "A" * 43,
        "not-a-key",
        "a.b.c",
        "x" * 10000,
    ],
)
def test_unknown_credentials_are_invalid(client, api_key, credential):
    response = get_models(client, "Bearer " + credential.format(key=api_key))
    assert_401(response, "Invalid API key")


def test_valid_key(client, api_key):
    response = get_models(client, f"Bearer {api_key}")
    assert response.status_code == 200
    assert response.json()["object"] == "list"


def test_key_format_and_storage(license, make_key):
    from licensing.access.credentials import key_digest
    from licensing.models import ApiKey

    key = make_key(license)
    assert key.startswith("sk-svc-") and len(key) == len("sk-svc-") + 43
    row = ApiKey.objects.get()
    assert row.digest == key_digest(key) and key not in (row.prefix, row.digest)
    assert key.startswith(row.prefix)


def test_deactivated_key(client, license, make_key):
    from licensing.models import ApiKey

    key = make_key(license)
    assert get_models(client, f"Bearer {key}").status_code == 200
    row = ApiKey.objects.get()
    row.active = False
    row.save()
    assert_401(get_models(client, f"Bearer {key}"), "Invalid API key")


def test_expired_key(client, license, make_key):
    key = make_key(license, expires_at=timezone.now() - timedelta(seconds=1))
    assert_401(get_models(client, f"Bearer {key}"), "Invalid API key")
    fresh = make_key(license, expires_at=timezone.now() + timedelta(days=1))
    assert get_models(client, f"Bearer {fresh}").status_code == 200


def test_deactivated_license_and_license_type(client, license, api_key):
    assert get_models(client, f"Bearer {api_key}").status_code == 200
    license.active = False
    license.save()
    assert_401(get_models(client, f"Bearer {api_key}"), "Invalid API key")
    license.active = True
    license.save()
    assert get_models(client, f"Bearer {api_key}").status_code == 200
    license.license_type.active = False
    license.license_type.save()
    assert_401(get_models(client, f"Bearer {api_key}"), "Invalid API key")


# --- JWT --------------------------------------------------------------------------------------


@pytest.fixture
def rsa_keys():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public_pem


@pytest.fixture
def issuer(license, rsa_keys):
    return JwtIssuer.objects.create(
        institution=Institution.objects.get(),
        license=license,
        issuer=ISSUER,
        audience=AUDIENCE,
        algorithms=["HS256", "RS256"],
        public_keys=rsa_keys[1],
        hs256_secret=HS_SECRET,
    )


def claims(**overrides):
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "student-42", "exp": now + 300, "iat": now}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def test_jwt_hs256_auto_provisions_end_user_once(client, issuer):
    token = jwt.encode(claims(), HS_SECRET, algorithm="HS256")
    for _ in range(2):
        assert get_models(client, f"Bearer {token}").status_code == 200
    user = EndUser.objects.get()
    assert (user.subject, user.license_id, user.issuer_id) == (
        "student-42",
        issuer.license_id,
        issuer.pk,
    )


def test_jwt_rs256_with_static_public_key(client, issuer, rsa_keys):
    token = jwt.encode(claims(sub="teacher-1"), rsa_keys[0], algorithm="RS256")
    assert get_models(client, f"Bearer {token}").status_code == 200
    assert EndUser.objects.filter(subject="teacher-1").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        {"exp": None},
        {"exp": int(time.time()) - 10},
        {"iss": "https://evil.example"},
        {"aud": "someone-else"},
        {"sub": None},
    ],
    ids=["no-exp", "expired", "wrong-iss", "wrong-aud", "no-sub"],
)
def test_jwt_bad_claims(client, issuer, overrides):
    token = jwt.encode(claims(**overrides), HS_SECRET, algorithm="HS256")
    assert_401(get_models(client, f"Bearer {token}"), "Invalid API key")
    assert not EndUser.objects.exists()


def test_jwt_alg_none_forged_and_confused(client, issuer, rsa_keys):
    unsigned = jwt.encode(claims(), None, algorithm="none")
    forged = jwt.encode(claims(), "wrong-secret-wrong-secret-wrong-secret", algorithm="HS256")
    # Algorithm confusion: an HS256 token "signed" with the issuer's public RSA key.
    header = jwt.utils.base64url_encode(b'{"alg":"HS256","typ":"JWT"}').decode()
    import hashlib
    import hmac
    import json

    payload = jwt.utils.base64url_encode(json.dumps(claims()).encode()).decode()
    signature = hmac.new(
        rsa_keys[1].encode(), f"{header}.{payload}".encode(), hashlib.sha256
    ).digest()
    confused = f"{header}.{payload}.{jwt.utils.base64url_encode(signature).decode()}"
    for token in (unsigned, forged, confused):
        assert_401(get_models(client, f"Bearer {token}"), "Invalid API key")
    assert not EndUser.objects.exists()


def test_jwt_algorithm_not_allowed(client, issuer):
    issuer.algorithms = ["RS256"]
    issuer.save()
    token = jwt.encode(claims(), HS_SECRET, algorithm="HS256")
    assert_401(get_models(client, f"Bearer {token}"), "Invalid API key")


def test_jwt_inactive_issuer_and_license(client, issuer):
    token = jwt.encode(claims(), HS_SECRET, algorithm="HS256")
    issuer.active = False
    issuer.save()
    assert_401(get_models(client, f"Bearer {token}"), "Invalid API key")
    issuer.active = True
    issuer.save()
    issuer.license.active = False
    issuer.license.save()
    assert_401(get_models(client, f"Bearer {token}"), "Invalid API key")


def test_jwt_from_jwks_url(client, license, rsa_keys, settings):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_keys[0].public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    body = json.dumps({"keys": [jwk]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    # A JWKS on loopback and plain http: only through the operator's allow-list.
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, server.server_address[1]}),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        JwtIssuer.objects.create(
            institution=Institution.objects.get(),
            license=license,
            issuer="https://jwks.example.edu",
            audience=AUDIENCE,
            algorithms=["RS256"],
            jwks_url=f"http://127.0.0.1:{server.server_address[1]}/jwks.json",
        )
        token = jwt.encode(
            claims(iss="https://jwks.example.edu"),
            rsa_keys[0],
            algorithm="RS256",
            headers={"kid": "k1"},
        )
        assert get_models(client, f"Bearer {token}").status_code == 200
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode(
            claims(iss="https://jwks.example.edu"), other, algorithm="RS256", headers={"kid": "k1"}
        )
        assert_401(get_models(client, f"Bearer {forged}"), "Invalid API key")
    finally:
        server.shutdown()


def test_per_user_budget_holder_is_the_end_user(issuer):
    from licensing.access.credentials import resolve_credential

    token = jwt.encode(claims(), HS_SECRET, algorithm="HS256")
    principal = resolve_credential(token)
    assert principal.holder == f"user:{EndUser.objects.get().pk}"

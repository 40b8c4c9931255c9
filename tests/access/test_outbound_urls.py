"""URLs an institution admin sets (a JWT issuer's JWKS URL now; OIDC and LTI URLs next) go
through the SSRF guard of core/outbound.py: refused when saved, never contacted when they reach
the database some other way, fetched at most once per URL a minute whatever tokens say, and a
JWKS that fails is the client's 401, never a 500."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import ValidationError
from django.urls import reverse

from core import outbound
from licensing.access import jwks
from licensing.models import Institution, JwtIssuer

pytestmark = pytest.mark.django_db(transaction=True)

AUDIENCE = "inference-gateway"
PUBLIC = {
    "idp.example.edu": ["93.184.216.34"],
    "idp6.example.edu": ["2606:2800:220:1:248:1893:25c8:1946"],
    "internal.example.edu": ["10.0.0.5"],
    "mixed.example.edu": ["93.184.216.34", "127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
}


# --- the network edge: a resolver for made-up names, a listener, a JWKS server ----------------


@pytest.fixture
def dns(monkeypatch):
    """Answers for made-up names as a DNS server would give them (the machine has no DNS)."""

    def getaddrinfo_sync(host, port):
        if host not in PUBLIC:
            raise OSError("Name or service not known")
        return PUBLIC[host]

    monkeypatch.setattr(outbound, "getaddrinfo_sync", getaddrinfo_sync)


class Listener:
    """A TCP port that records every connection it accepts (and closes it at once)."""

    def __init__(self, family=socket.AF_INET, host="127.0.0.1"):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed
            self.accepted.append(peer)
            conn.close()

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close() does not)
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.fixture
def listener():
    listen = Listener()
    yield listen
    listen.close()


@pytest.fixture
def listener6():
    try:
        listen = Listener(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    yield listen
    listen.close()


class JwksServer(ThreadingHTTPServer):
    """A JWKS endpoint on 127.0.0.1 that counts requests; `mode` picks how it answers."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _JwksHandler)
        self.mode = "jwks"
        self.body = b'{"keys": []}'
        self.redirect_to = ""
        self.requests = 0
        self.sent = 0
        self.release = threading.Event()
        self.url = f"http://127.0.0.1:{self.server_address[1]}/jwks.json"


class _JwksHandler(BaseHTTPRequestHandler):
    server: JwksServer

    def do_GET(self):
        server = self.server
        server.requests += 1
        mode = server.mode
        if mode == "close":  # the connection closed without an answer
            self.close_connection = True
            return
        if mode == "redirect":
            self._head(302, {"Location": server.redirect_to, "Content-Length": "0"})
            return
        if mode == "status500":
            self._head(500, {"Content-Length": "0"})
            return
        if mode == "huge":  # 50 MB announced and sent until the client hangs up
            self._head(200, {"Content-Length": str(50 * 1024 * 1024)})
            chunk = b" " * (1024 * 1024)
            try:
                for _ in range(50):
                    self.wfile.write(chunk)
                    server.sent += len(chunk)
            except OSError:
                pass
            return
        if mode == "stall":  # a first few bytes, then nothing until the test ends
            self._head(200, {"Content-Length": "1000"})
            self.wfile.write(b'{"keys": [')
            self.wfile.flush()
            server.release.wait(30)
            return
        body = {
            "jwks": server.body,
            "garbage": b"<html>certainly not JSON</html>",
            "deep": b"[" * 200_000,
            "not_a_set": b'{"kty": "RSA"}',
            "gzip": server.body,
        }[mode]
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if mode == "gzip":
            headers["Content-Encoding"] = "gzip"
        self._head(200, headers)
        self.wfile.write(body)

    def _head(self, status, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, *args):
        pass


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    """The JWKS cache's clock, moved by the test (no test waits for the wall clock)."""
    fake = Clock()
    jwks.jwks_cache.clear()
    monkeypatch.setattr(jwks.jwks_cache, "clock", fake)
    yield fake
    jwks.jwks_cache.clear()


@pytest.fixture
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def jwks_server(settings, signing_key):
    server = JwksServer()
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    server.body = json.dumps({"keys": [jwk]}).encode()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # Loopback and plain http: only what the operator's allow-list opens (tests' settings).
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, server.server_address[1]}),
    }
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def gateway_log():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.WARNING)
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def make_issuer(license, jwks_url, iss="https://idp.example.edu") -> JwtIssuer:
    """Written straight to the database, past every check on save (as a migration, a raw
    update or an older release would)."""
    return JwtIssuer.objects.create(
        institution=Institution.objects.get(),
        license=license,
        issuer=iss,
        audience=AUDIENCE,
        algorithms=["RS256"],
        jwks_url=jwks_url,
    )


def token(key, kid, iss="https://idp.example.edu", sub="student-1"):
    claims = {"iss": iss, "aud": AUDIENCE, "sub": sub, "exp": int(time.time()) + 600}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def models(client, credential):
    return client.get("/v1/models", headers={"Authorization": f"Bearer {credential}"})


def assert_401(response):
    assert response.status_code == 401, response.text
    assert response.json() == {"error": {"message": "Invalid API key"}}


# --- refused when saved ---------------------------------------------------------------------


def refusal_at_save(license, url) -> str:
    issuer = JwtIssuer(
        institution=Institution.objects.get(),
        license=license,
        issuer="https://idp.example.edu",
        audience=AUDIENCE,
        algorithms=["RS256"],
        jwks_url=url,
    )
    with pytest.raises(ValidationError) as caught:
        issuer.full_clean()
    assert "jwks_url" in caught.value.message_dict, caught.value
    return " ".join(caught.value.message_dict["jwks_url"])


REFUSED_AT_SAVE = {
    "https://127.0.0.1:{port}/jwks.json": "not a public address",
    "http://127.0.0.1:{port}/jwks.json": "not a public address",
    "https://[::1]:{port}/jwks.json": "not a public address",
    "https://127.0.0.1:5432/": "not a public address",
    "https://127.0.0.1/": "not a public address",
    "https://169.254.169.254/latest/meta-data/": "cloud metadata address",
    "http://169.254.169.254/latest/meta-data/": "cloud metadata address",
    "https://[fd00:ec2::254]/": "cloud metadata address",
    "https://10.0.0.1/jwks": "not a public address",
    "https://internal.example.edu/jwks": "not a public address",
    "https://mixed.example.edu/jwks": "not a public address",
    "https://localhost/jwks": "not a public address",
    "http://idp.example.edu/jwks": "Only https URLs are allowed",
    "https://nowhere.example.edu/jwks": "could not be resolved",
    # Hostile spellings: each a validation message, never an exception.
    "https://idp.example.edu/\x00jwks": "Not a valid URL",
    "https://idp.example.edu/\ud800": "Not a valid URL",
    "https://idp.example.edu/ jwks": "Not a valid URL",
    "https://[::ffff:127.0.0.1]/": "not a public address",
    "https://[::ffff:7f00:1]/": "not a public address",
    "https://[::ffff:169.254.169.254]/": "cloud metadata address",
    "https://[2002:7f00:1::]/": "embeds a refused IPv4 address",
    "http://2130706433/": "usual dotted form",
    "https://2130706433/": "usual dotted form",
    "https://0x7f.1/": "usual dotted form",
    "https://0x7f000001/": "usual dotted form",
    "https://127.1/": "usual dotted form",
    "https://017700000001/": "usual dotted form",
    "https://user:secret@idp.example.edu/jwks": "credentials",
    "https://idp.example.edu@127.0.0.1/jwks": "credentials",
    "https://idp.example.edu\\@127.0.0.1/jwks": "credentials",
    "https://idp.example.edu:99999/jwks": "Not a valid URL",
    "https://idp.example.edu:8443/jwks": "Port 8443 is not allowed",
    "https://[fe80::1%25eth0]/": "zone",
    "https://[::1/": "Not a valid URL",
    "ftp://idp.example.edu/jwks": "Only absolute https URLs",
    "file:///etc/passwd": "Only absolute https URLs",
    "//idp.example.edu/jwks": "Only absolute https URLs",
    "https:///jwks": "Only absolute https URLs",
    "https://idp_example.edu/": "not a valid host name",
    "https://bücher.example/": "ASCII only",
    "https://idp.example.edu/" + "a" * 3000: "Not a valid URL",
}


@pytest.mark.parametrize("url", list(REFUSED_AT_SAVE))
def test_refused_when_saved(license, settings, dns, listener, url):
    # The listener's port is open, so that only the address refuses it.
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, listener.port}),
    }
    message = refusal_at_save(license, url.format(port=listener.port))
    assert REFUSED_AT_SAVE[url] in message, message
    assert listener.accepted == []  # checking a URL never connects to it


def test_public_https_urls_are_accepted_when_saved(license, dns):
    for url in (
        "https://idp.example.edu/.well-known/jwks.json",
        "https://IDP.example.edu.:443/jwks?tenant=1",
        "https://idp6.example.edu/jwks",
        "https://93.184.216.34/jwks",
    ):
        issuer = JwtIssuer(
            institution=Institution.objects.get(),
            license=license,
            issuer="https://idp.example.edu",
            audience=AUDIENCE,
            algorithms=["RS256"],
            jwks_url=url,
        )
        issuer.full_clean()


def test_the_operator_allow_list_opens_its_networks_and_nothing_else(license, settings, dns):
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "10.0.0.0/8, 169.254.0.0/16",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, 8080}),
    }
    issuer = JwtIssuer(
        institution=Institution.objects.get(),
        license=license,
        issuer="https://idp.example.edu",
        audience=AUDIENCE,
        algorithms=["RS256"],
        jwks_url="http://internal.example.edu:8080/jwks",  # http inside the allow-list
    )
    issuer.full_clean()
    assert "cloud metadata" in refusal_at_save(license, "http://169.254.169.254/")
    assert "not a public" in refusal_at_save(license, "https://127.0.0.1/")
    assert "Port 5432" in refusal_at_save(license, "https://10.0.0.1:5432/")
    assert "Only https" in refusal_at_save(license, "http://idp.example.edu/")


def test_the_admin_form_shows_the_refusal(admin_client, license, dns):
    add = reverse("admin:licensing_jwtissuer_add")
    institution = Institution.objects.get()
    base = {
        "issuer": "https://idp.example.edu",
        "audience": AUDIENCE,
        "institution": str(institution.pk),
        "license": str(license.pk),
        "active": "on",
        "algorithms": '["RS256"]',
        "public_keys": "",
        "hs256_secret": "",
    }
    for url, message in (
        ("https://127.0.0.1:5432/", "not a public address"),
        ("https://169.254.169.254/", "cloud metadata address"),
        ("http://idp.example.edu/jwks", "Only https URLs are allowed"),
    ):
        response = admin_client.post(add, {**base, "jwks_url": url})
        assert response.status_code == 200
        assert message in response.content.decode()
    # What a browser sends for a NUL and a lone surrogate (its UTF-8 bytes): still a message.
    for raw in ("https%3A%2F%2Fidp.example.edu%2F%00", "https%3A%2F%2Fidp.example.edu%2F%ED%A0%80"):
        body = urlencode(base) + "&jwks_url=" + raw
        response = admin_client.post(add, body, content_type="application/x-www-form-urlencoded")
        assert response.status_code == 200
        assert "errornote" in response.content.decode()
    assert not JwtIssuer.objects.exists()
    response = admin_client.post(add, {**base, "jwks_url": "https://idp.example.edu/jwks"})
    assert response.status_code == 302
    assert JwtIssuer.objects.get().jwks_url == "https://idp.example.edu/jwks"


# --- never contacted when fetched ------------------------------------------------------------


def test_a_jwks_url_on_loopback_is_never_contacted(
    client, license, settings, listener, listener6, signing_key, clock, gateway_log
):
    """Rows written past validation: each token with a fresh `kid` asks for the JWKS, and the
    guard refuses before any socket is opened (the listeners count 0 connections)."""
    settings.GATEWAY = {
        **settings.GATEWAY,
        # The ports are open, so that only the address can refuse.
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, 80, listener.port, listener6.port}),
    }
    port, port6 = listener.port, listener6.port
    urls = [
        f"http://127.0.0.1:{port}/jwks.json",
        f"https://127.0.0.1:{port}/jwks.json",
        f"http://[::1]:{port6}/jwks.json",
        f"http://[::ffff:127.0.0.1]:{port}/",
        f"http://[::ffff:7f00:1]:{port}/",
        f"http://localhost:{port}/",
        f"http://2130706433:{port}/",
        f"http://0x7f.1:{port}/",
        f"http://127.1:{port}/",
        f"http://user:pw@127.0.0.1:{port}/",
        f"http://0.0.0.0:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:5432/",
    ]
    for n, url in enumerate(urls):
        iss = f"https://idp-{n}.example.edu"
        make_issuer(license, url, iss=iss)
        for attempt in range(3):
            assert_401(models(client, token(signing_key, f"kid-{attempt}", iss=iss)))
        clock.advance(61)  # due again: the guard is asked again, and refuses again
        assert_401(models(client, token(signing_key, "kid-late", iss=iss)))
    assert listener.accepted == [] and listener6.accepted == []
    refused = [r.getMessage() for r in gateway_log if r.getMessage().startswith("JWKS ")]
    assert len(refused) == 2 * len(urls), refused
    assert all("not usable" in line for line in refused)
    # The control: once the operator opens loopback, the same listener does see the fetch.
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOW": "127.0.0.1/32"}
    with pytest.raises(outbound.Refused):
        outbound.fetch_outbound_json(urls[0], max_bytes=1000, timeout=5)
    assert len(listener.accepted) == 1


# --- at most one fetch per URL a minute -------------------------------------------------------


def test_unknown_kids_cost_one_fetch_a_minute(client, license, jwks_server, signing_key, clock):
    make_issuer(license, jwks_server.url)
    for n in range(50):
        assert_401(models(client, token(signing_key, f"made-up-{n}")))
    assert jwks_server.requests == 1
    # The set fetched for the first made-up kid serves the real one without another fetch.
    assert models(client, token(signing_key, "k1")).status_code == 200
    clock.advance(59)
    assert_401(models(client, token(signing_key, "made-up-late")))
    assert jwks_server.requests == 1
    clock.advance(2)
    assert_401(models(client, token(signing_key, "made-up-later")))
    assert jwks_server.requests == 2
    # Known keys are used for LIFESPAN, then fetched again by the next token that needs them.
    for _ in range(5):
        assert models(client, token(signing_key, "k1")).status_code == 200
    assert jwks_server.requests == 2
    clock.advance(jwks.LIFESPAN)
    assert models(client, token(signing_key, "k1")).status_code == 200
    assert jwks_server.requests == 3


def test_concurrent_unknown_kids_cost_one_fetch(client, license, jwks_server, signing_key, clock):
    make_issuer(license, jwks_server.url)
    tokens = [token(signing_key, f"made-up-{n}", sub=f"s-{n}") for n in range(50)]
    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = list(pool.map(lambda t: models(client, t).status_code, tokens))
    assert statuses == [401] * 50
    assert jwks_server.requests == 1


def test_a_failed_fetch_is_remembered_for_a_minute(
    client, license, jwks_server, signing_key, clock
):
    make_issuer(license, jwks_server.url)
    jwks_server.mode = "status500"
    for n in range(50):
        assert_401(models(client, token(signing_key, f"k-{n % 2}")))
    assert jwks_server.requests == 1
    jwks_server.mode = "jwks"  # the provider is back: the next minute picks it up
    assert_401(models(client, token(signing_key, "k1")))
    clock.advance(60)
    assert models(client, token(signing_key, "k1")).status_code == 200
    assert jwks_server.requests == 2


# --- a JWKS that fails is the client's 401 ------------------------------------------------------


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("close", "connection_failed"),
        ("garbage", "invalid_json"),
        ("deep", "invalid_json"),
        ("not_a_set", "invalid_jwks"),
        ("huge", "too_large"),
        ("status500", "http_error"),
        ("gzip", "unreadable_content"),
        ("redirect", "redirect_not_allowed"),
        ("stall", "timeout"),
    ],
)
def test_a_failing_jwks_is_401_never_500(
    client,
    license,
    jwks_server,
    signing_key,
    clock,
    gateway_log,
    listener,
    monkeypatch,
    mode,
    reason,
):
    monkeypatch.setattr(jwks, "TIMEOUT", 0.5)  # the stall: half a second instead of 5
    jwks_server.mode = mode
    jwks_server.redirect_to = f"http://127.0.0.1:{listener.port}/jwks.json"
    make_issuer(license, jwks_server.url)
    started = time.monotonic()
    for n in range(5):
        assert_401(models(client, token(signing_key, "k1", sub=f"s-{n}")))
    elapsed = time.monotonic() - started
    print(f"JWKS {mode}: 5 tokens answered 401 in {elapsed:.2f} s, {jwks_server.sent} B sent")
    assert jwks_server.requests == 1
    assert listener.accepted == []  # a redirect is never followed
    lines = [r.getMessage() for r in gateway_log if r.getMessage().startswith("JWKS ")]
    assert lines == [lines[0]] and f"({reason})" in lines[0], lines
    assert elapsed < 5, elapsed  # the stall is cut at the fetch's deadline
    if mode == "huge":
        # Read up to the cap and hung up: far from the 50 MB announced.
        assert jwks_server.sent < 20 * 1024 * 1024


def test_fetch_outbound_json_reads_what_it_admits(settings, jwks_server):
    """The API the OIDC and LTI work will use: JSON back, or one Refused with a message."""
    assert outbound.fetch_outbound_json(jwks_server.url, max_bytes=65536, timeout=5)["keys"]
    with pytest.raises(outbound.Refused) as caught:
        outbound.fetch_outbound_json(jwks_server.url, max_bytes=100, timeout=5)
    assert caught.value.code == "too_large"
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOW": ""}
    with pytest.raises(outbound.Refused) as caught:
        outbound.fetch_outbound_json(jwks_server.url, max_bytes=65536, timeout=5)
    assert caught.value.code == "blocked_address"
    assert jwks_server.requests == 2  # the refused third one never reached it


def test_the_certificate_is_verified(settings, tmp_path, signing_key):
    """TLS to the admitted address still checks the certificate against the host name and the
    public CAs: a self-signed JWKS server is refused."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(signing_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(signing_key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        signing_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = JwksServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
    }
    try:
        with pytest.raises(outbound.Refused) as caught:
            outbound.fetch_outbound_json(f"https://127.0.0.1:{port}/", max_bytes=1000, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert caught.value.code == "certificate_untrusted"
    assert "self-signed certificate" in caught.value.message  # the ssl module's own words
    assert "GATEWAY_EXTRA_CA_CERTS" in caught.value.message  # what an operator can do
    assert server.requests == 0

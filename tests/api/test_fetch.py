"""POST /v1/fetch end to end: the gateway fetches from a real web site on 127.0.0.1 (the
WebsiteFake) through its SSRF guard; DNS answers for made-up names come from the test (the
network edge), and nothing is ever sent to a non-loopback address."""

from __future__ import annotations

import asyncio
import ipaddress
import time

import openai
import pytest

from inference import ssrf
from licensing.models import Transaction, Wallet
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)


def fetch(client, auth, body, **headers):
    return client.post("/v1/fetch", json=body, headers={**auth, **headers})


def results(response):
    assert response.status_code == 200, response.text
    return response.json()["results"]


def only(response):
    (page,) = results(response)
    return page


def error_code(page):
    assert page["status"] == "error", page
    assert page["content"] is None and page["title"] is None
    return page["error"]["code"]


@pytest.fixture
def site(website, catalog):
    return website


@pytest.fixture
def port(site):
    return int(site.origin.rsplit(":", 1)[1])


@pytest.fixture
def dns(monkeypatch):
    """Answers for made-up host names, as a DNS server would give them; records every lookup."""
    answers: dict[str, list[str]] = {}
    lookups: list[str] = []

    async def getaddrinfo(host, port):
        lookups.append(host)
        if host not in answers:
            raise OSError("Name or service not known")
        return answers[host]

    monkeypatch.setattr(ssrf, "getaddrinfo", getaddrinfo)
    answers["lookups"] = lookups  # type: ignore[assignment]
    return answers


@pytest.fixture
def no_allowance(settings):
    """The default: nothing private is open (the site's port stays allowed)."""
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_ALLOW_PRIVATE": ""}


# --- content -----------------------------------------------------------------------------------


def test_html_to_markdown(client, auth, site):
    url = f"{site.origin}/article.html"
    page = only(fetch(client, auth, {"urls": [url]}))
    assert page["status"] == "ok" and page["error"] is None
    assert (page["url"], page["final_url"]) == (url, url)
    assert page["title"] == "Photosynthesis explained"
    assert page["content_type"] == "text/html"
    content = page["content"]
    assert "**sunlight**" in content
    assert "- The Calvin cycle" in content
    assert "[the encyclopedia](https://en.wikipedia.org/wiki/Photosynthesis)" in content
    for noise in ("Menu item", "Copyright footer", "do not extract me"):
        assert noise not in content


def test_html_to_text(client, auth, site):
    page = only(fetch(client, auth, {"urls": [f"{site.origin}/article.html"], "format": "text"}))
    assert "Photosynthesis is the process" in page["content"]
    assert "**" not in page["content"] and "](" not in page["content"]


def test_text_json_and_pdf(client, auth, site):
    urls = [f"{site.origin}/{name}" for name in ("notes.txt", "data.json", "paper.pdf")]
    text, data, pdf = results(fetch(client, auth, {"urls": urls}))
    assert text["content"] == "Plain notes: caf\u00e9 \u2014 line one\nline two\n"
    assert text["content_type"] == "text/plain" and text["title"] is None
    assert data["content"] == '{"planet": "Mars", "moons": ["Phobos", "Deimos"]}'
    assert data["content_type"] == "application/json"
    assert pdf["content"] == "Mitochondria are the powerhouse of the cell"
    assert pdf["content_type"] == "application/pdf"


def test_max_characters(client, auth, site):
    page = only(fetch(client, auth, {"urls": [f"{site.origin}/notes.txt"], "max_characters": 5}))
    assert page["content"] == "Plain"


def test_one_bad_url_does_not_fail_the_others_and_order_is_kept(client, auth, site):
    urls = [
        f"{site.origin}/missing",
        f"{site.origin}/notes.txt",
        f"{site.origin}/picture.png",
        f"{site.origin}/broken.pdf",
        f"{site.origin}/article.html",
    ]
    pages = results(fetch(client, auth, {"urls": urls}))
    assert [p["url"] for p in pages] == urls
    assert [p["status"] for p in pages] == ["error", "ok", "error", "error", "ok"]
    assert pages[0]["error"] == {"code": "http_error", "message": "The page answered 404"}
    assert pages[2]["error"] == {
        "code": "unsupported_content_type",
        "message": "Content type 'image/png' is not supported",
    }
    assert error_code(pages[3]) == "unreadable_content"


# --- billing and the ledger --------------------------------------------------------------------


def test_billed_per_page_fetched(client, site, make_license, make_key):
    license = make_license(name="fetch-budget", limit=10_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    urls = [f"{site.origin}/notes.txt", f"{site.origin}/missing", f"{site.origin}/data.json"]
    response = fetch(client, auth, {"urls": urls})
    body = response.json()
    assert set(body) == {"id", "object", "results", "usage", "credits_remaining"}
    assert (body["object"], body["id"]) == ("fetch", response.headers["X-Request-Id"])
    assert body["usage"] == {"pages": 2, "credits_used": 2000}
    assert body["credits_remaining"] == 8_000
    # every URL failing is still a 200, and free
    body = fetch(client, auth, {"urls": [f"{site.origin}/missing"]}).json()
    assert body["usage"] == {"pages": 0, "credits_used": 0}
    assert Wallet.objects.get(license=license).spent == 2000
    rows = Transaction.objects.order_by("created_at")
    assert [
        (r.service, r.provider, r.requested_model, r.status_code, r.units, r.credits) for r in rows
    ] == [
        ("fetch", "fetch", "web-fetch", 200, 2, 2000),
        ("fetch", "fetch", "web-fetch", 200, 0, 0),
    ]
    assert rows[0].connection == "default"


def test_sdk_generic_post(gateway, api_key, site):
    """The openai SDK has no fetch call; its generic `post` reaches the endpoint."""
    sdk = openai.OpenAI(api_key=api_key, base_url=gateway.url + "/v1", max_retries=0)
    answer = sdk.post("/fetch", body={"urls": [f"{site.origin}/notes.txt"]}, cast_to=object)
    assert answer["results"][0]["status"] == "ok"
    with pytest.raises(openai.UnprocessableEntityError):
        sdk.post("/fetch", body={"urls": f"{site.origin}/notes.txt"}, cast_to=object)


# --- redirects ---------------------------------------------------------------------------------


def test_redirects_are_followed_up_to_five(client, auth, site):
    five, six = (f"{site.origin}/chain/{n}" for n in (5, 6))
    ok, too_many = results(fetch(client, auth, {"urls": [five, six]}))
    assert ok["status"] == "ok" and ok["final_url"] == f"{site.origin}/article.html"
    assert too_many["error"] == {"code": "too_many_redirects", "message": "More than 5 redirects"}


@pytest.mark.parametrize(
    "target",
    [
        "http://10.0.0.5/admin",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://192.168.1.1/",
        "http://127.0.0.2:{port}/article.html",
        "http://[::1]:{port}/article.html",
        "http://0.0.0.0:{port}/article.html",
        "http://[::ffff:10.0.0.1]/",
    ],
)
def test_redirect_to_a_private_address_is_refused(client, auth, site, port, target):
    target = target.format(port=port)
    url = f"{site.origin}/redirect?to={target}"
    started = time.monotonic()
    page = only(fetch(client, auth, {"urls": [url]}))
    assert error_code(page) == "blocked_address"
    assert time.monotonic() - started < 2  # refused before any connection attempt
    assert [r.path for r in site.requests] == ["/redirect"]  # nothing fetched past the guard


def test_redirect_to_another_port_or_scheme(client, auth, site):
    urls = [
        f"{site.origin}/redirect?to=http://127.0.0.1:22/",
        f"{site.origin}/redirect?to=file:///etc/passwd",
        f"{site.origin}/redirect?to=/notes.txt&status=301",
    ]
    urls.append(f"{site.origin}/redirect?to=http://[::1")
    port22, file_url, relative, broken = results(fetch(client, auth, {"urls": urls}))
    assert port22["error"] == {"code": "blocked_port", "message": "Port 22 is not allowed"}
    assert error_code(file_url) == "invalid_url"
    # httpx itself refuses the Location header: an answer that cannot be read
    assert broken["error"] == {"code": "connection_failed", "message": "The page could not be read"}
    assert relative["status"] == "ok" and relative["final_url"] == f"{site.origin}/notes.txt"


def test_no_cookies_or_credentials_are_forwarded(client, auth, site):
    page = only(fetch(client, auth, {"urls": [f"{site.origin}/set-cookie"]}))
    assert page["final_url"] == f"{site.origin}/echo"
    import json

    headers = json.loads(page["content"])["headers"]
    assert "cookie" not in headers and "authorization" not in headers
    assert headers["user-agent"] == "inference-gateway-fetch/1.0"
    assert "x-service-metadata" not in headers
    with_userinfo = f"http://user:pw@127.0.0.1:{site.origin.rsplit(':', 1)[1]}/echo"
    page = only(fetch(client, auth, {"urls": [with_userinfo]}))
    assert page["error"] == {
        "code": "invalid_url",
        "message": "URLs with credentials are not fetched",
    }


# --- the guard: addresses, DNS, the operator switch ---------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0x7f000001", "017700000001", "127.1", "[::ffff:127.0.0.1]"],
)
def test_loopback_in_every_spelling_is_refused_by_default(
    client, auth, site, port, no_allowance, host
):
    page = only(fetch(client, auth, {"urls": [f"http://{host}:{port}/article.html"]}))
    assert error_code(page) == "blocked_address"
    assert site.requests == []


def test_names_resolving_to_internal_addresses(client, auth, site, port, dns, no_allowance):
    dns["internal.test"] = ["10.1.2.3"]
    dns["metadata.test"] = ["169.254.169.254"]
    dns["loopback.test"] = ["127.0.0.1"]
    dns["mixed.test"] = ["93.184.216.34", "127.0.0.1"]  # one bad answer refuses the name
    dns["v6.test"] = ["fe80::1%eth0"]
    names = ["internal.test", "metadata.test", "loopback.test", "mixed.test", "v6.test"]
    pages = results(fetch(client, auth, {"urls": [f"http://{n}:{port}/" for n in names]}))
    assert [error_code(p) for p in pages] == ["blocked_address"] * 5
    unknown = only(fetch(client, auth, {"urls": [f"http://nowhere.test:{port}/"]}))
    assert unknown["error"] == {
        "code": "dns_error",
        "message": "Host 'nowhere.test' could not be resolved",
    }
    assert site.requests == []


def test_connects_to_the_checked_address_with_one_lookup(client, auth, site, port, dns):
    """A rebinding DNS server gets one question per connection: the socket goes to the address
    that was checked, and the Host header (and TLS name) keep the host name."""
    answers = iter([["127.0.0.1"], ["10.0.0.1"], ["169.254.169.254"]])

    async def rebinding(host, port):
        dns["lookups"].append(host)
        return next(answers)

    ssrf.getaddrinfo, original = rebinding, ssrf.getaddrinfo
    try:
        page = only(fetch(client, auth, {"urls": [f"http://rebind.test:{port}/notes.txt"]}))
    finally:
        ssrf.getaddrinfo = original
    assert page["status"] == "ok", page
    assert dns["lookups"] == ["rebind.test"]
    assert site.last.headers["host"] == f"rebind.test:{port}"


def test_the_loopback_allowance_opens_nothing_else():
    networks = ssrf._networks("127.0.0.1/32")
    for address in ("127.0.0.1", "::ffff:127.0.0.1"):
        assert ssrf.refusal(ipaddress.ip_address(address), networks) is None
    refused = [
        "127.0.0.2",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.0.1",
        "169.254.169.254",
        "169.254.1.1",
        "100.64.0.1",
        "100.100.100.200",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.2.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "ff02::1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "2002:a00:1::",  # 6to4 around 10.0.0.1
        "2002:7f00:2::",  # 6to4 around 127.0.0.2
        "64:ff9b::a00:1",  # NAT64 around 10.0.0.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo around 10.0.0.1
    ]
    for address in refused:
        assert ssrf.refusal(ipaddress.ip_address(address), networks), address
    for address in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"):
        assert ssrf.refusal(ipaddress.ip_address(address), networks) is None
    # Metadata stays closed even when an operator opens its whole network.
    wide = ssrf._networks("169.254.0.0/16, 10.0.0.0/8")
    assert ssrf.refusal(ipaddress.ip_address("169.254.169.254"), wide)
    assert ssrf.refusal(ipaddress.ip_address("169.254.1.1"), wide) is None
    assert ssrf.refusal(ipaddress.ip_address("10.9.9.9"), wide) is None


class RecordingBackend:
    """The socket layer under the guard: records every connection it is asked to open."""

    def __init__(self):
        self.calls = []

    async def connect_tcp(self, host, port, **kwargs):
        self.calls.append((host, port))
        raise ConnectionRefusedError("recorded only")


def test_the_guard_refuses_before_the_socket_layer(settings, monkeypatch):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_ALLOW_PRIVATE": "127.0.0.1/32"}

    async def resolver(host, port):
        return {"good.test": ["127.0.0.1"], "bad.test": ["10.0.0.7"]}[host]

    monkeypatch.setattr(ssrf, "getaddrinfo", resolver)
    inner = RecordingBackend()
    backend = ssrf.GuardedBackend(inner)

    async def attempt(host, port):
        try:
            await backend.connect_tcp(host, port)
        except ssrf.Refused as exc:
            return exc.code
        except ConnectionRefusedError:
            return "connected"

    async def scenario():
        return [
            await attempt("10.0.0.1", 80),
            await attempt("169.254.169.254", 80),
            await attempt("bad.test", 443),
            await attempt("good.test", 8080),
            await attempt("good.test", 443),
            await attempt("127.0.0.1", 80),
        ]

    outcome = asyncio.run(scenario())
    assert outcome == [
        "blocked_address",
        "blocked_address",
        "blocked_address",
        "blocked_port",
        "connected",
        "connected",
    ]
    assert inner.calls == [("127.0.0.1", 443), ("127.0.0.1", 80)]  # the address, not the name


# --- limits ------------------------------------------------------------------------------------


def test_slow_page_times_out(client, auth, site, settings):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_TIMEOUT": 1.0}
    site.hang_next(10)
    started = time.monotonic()
    slow, fast = results(
        fetch(client, auth, {"urls": [f"{site.origin}/notes.txt", f"{site.origin}/data.json"]})
    )
    assert time.monotonic() - started < 5
    assert slow["error"] == {"code": "timeout", "message": "No complete answer within 1 seconds"}
    assert fast["status"] == "ok"


def test_trickling_page_hits_the_per_url_limit(client, auth, site, settings):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_TIMEOUT": 1.0}
    site.chunk_delay = 0.2  # 20 pieces: 4 s in all, each well within a read time-out
    page = only(fetch(client, auth, {"urls": [f"{site.origin}/trickle"]}))
    assert error_code(page) == "timeout"


def test_huge_pages_are_cut_off(client, auth, site, settings):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_MAX_BYTES": 1_000_000}
    site.trickle_chunks = 40
    urls = [f"{site.origin}/huge", f"{site.origin}/trickle?size=50000", f"{site.origin}/notes.txt"]
    declared, streamed, small = results(fetch(client, auth, {"urls": urls}))
    too_large = {"code": "too_large", "message": "The page is larger than 1000000 bytes"}
    assert declared["error"] == too_large  # Content-Length says so: not read at all
    assert streamed["error"] == too_large  # no Content-Length: reading stopped at the limit
    assert small["status"] == "ok"


# --- validation, policy, check order -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "type_", "loc"),
    [
        ({}, "missing", ["body", "urls"]),
        ({"urls": "https://example.com/"}, "list_type", ["body", "urls"]),
        ({"urls": []}, "too_short", ["body", "urls"]),
        ({"urls": [f"https://e.com/{i}" for i in range(11)]}, "too_long", ["body", "urls"]),
        ({"urls": ["ftp://example.com/x"]}, "value_error", ["body", "urls", 0]),
        ({"urls": ["example.com"]}, "value_error", ["body", "urls", 0]),
        ({"urls": ["http://"]}, "value_error", ["body", "urls", 0]),
        ({"urls": [""]}, "string_too_short", ["body", "urls", 0]),
        ({"urls": [5]}, "string_type", ["body", "urls", 0]),
        ({"urls": ["https://e.com/" + "a" * 3000]}, "string_too_long", ["body", "urls", 0]),
        ({"urls": ["https://e.com/"], "max_characters": 0}, "greater_than_equal", None),
        ({"urls": ["https://e.com/"], "max_characters": 100_001}, "less_than_equal", None),
        ({"urls": ["https://e.com/"], "format": "html"}, "literal_error", ["body", "format"]),
        ({"urls": ["https://e.com/"], "depth": 2}, "extra_forbidden", ["body", "depth"]),
    ],
)
def test_validation(client, auth, catalog, body, type_, loc):
    response = fetch(client, auth, body)
    assert response.status_code == 422, response.text
    item = response.json()["detail"][0]
    assert item["type"] == type_
    if loc is not None:
        assert item["loc"] == loc
    assert not Transaction.objects.exists()


def test_422_before_401(client, catalog):
    assert client.post("/v1/fetch", json={"urls": "x"}).status_code == 422
    response = client.post("/v1/fetch", json={"urls": ["https://e.com/"]})
    assert response.status_code == 401


def test_policy_max_items_and_patterns(client, site, make_license, make_key):
    allowed = site.origin.replace(".", r"\.") + r"/(notes\.txt|redirect\?.*)"
    policy = {
        "version": 1,
        "services": {"fetch": {"params": {"urls": {"max_items": 2, "patterns": [allowed]}}}},
    }
    auth = {"Authorization": f"Bearer {make_key(make_license(name='p', policy=policy))}"}
    notes = f"{site.origin}/notes.txt"
    response = fetch(client, auth, {"urls": [notes] * 3})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "'urls' exceeds maximum item count of 2",
        "code": "policy_denied",
        "param": "urls",
    }
    other = f"{site.origin}/data.json"
    response = fetch(client, auth, {"urls": [notes, other]})
    assert response.status_code == 403
    assert response.json()["error"]["message"] == (
        f"'urls' value '{other}' does not match any allowed pattern"
    )
    assert site.requests == []
    # A redirect cannot lead outside the patterns either.
    escape = f"{site.origin}/redirect?to=/data.json"
    ok, escaped = results(fetch(client, auth, {"urls": [notes, escape]}))
    assert ok["status"] == "ok"
    assert escaped["error"]["code"] == "redirect_not_allowed"
    assert [r.path for r in site.requests] == ["/notes.txt", "/redirect"]


def test_service_disabled_and_pins(client, site, make_license, make_key):
    policy = {"version": 1, "services": {"web_search": {}}}
    auth = {"Authorization": f"Bearer {make_key(make_license(name='nofetch', policy=policy))}"}
    response = fetch(client, auth, {"urls": [f"{site.origin}/notes.txt"]})
    assert response.json()["error"]["message"] == "service 'fetch' is not enabled for this license"
    open_auth = {"Authorization": f"Bearer {make_key(make_license(name='open'))}"}
    body = {"urls": [f"{site.origin}/notes.txt"]}
    response = fetch(client, open_auth, body, **{"X-Service-Provider": "websearch"})
    assert response.json()["error"]["message"] == (
        "No provider available for endpoint 'web_fetch' under the current pins"
    )
    response = fetch(client, open_auth, body, **{"X-Service-Provider": "fetch/other"})
    assert response.status_code == 400
    assert fetch(client, open_auth, body, **{"X-Service-Provider": "fetch"}).status_code == 200


def test_guardrails_on_urls_and_content(client, site, license, auth):
    license.license_type.guardrails = {
        "input": {"patterns": ["forbidden-site"]},
        "output": {"patterns": ["(?i)mitochondria"]},
    }
    license.license_type.save()
    response = fetch(client, auth, {"urls": ["https://forbidden-site.example/"]})
    assert response.json()["error"]["message"] == "Request blocked by guardrail"
    response = fetch(client, auth, {"urls": [f"{site.origin}/paper.pdf"]})
    assert response.status_code == 400
    row = Transaction.objects.get(error_code="output_blocked")
    assert (row.status_code, row.units, row.credits) == (400, 1, 1000)  # blocked output: charged
    assert refusal_codes() == ["guardrail_blocked"]  # the blocked input: not charged

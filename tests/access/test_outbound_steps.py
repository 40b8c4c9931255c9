"""core.outbound's steps without a network: an admin-set URL's host, a fetched answer's body,
and what a failed fetch is refused as."""

from __future__ import annotations

import ssl

import httpx
import pytest

from core.outbound import Refused, _answer_body, _checked_host, _transport_refusal


@pytest.mark.parametrize(
    ("hostname", "host"),
    [("idp.example.edu.", "idp.example.edu"), ("93.184.216.34", "93.184.216.34"), ("::1", "::1")],
)
def test_a_valid_host_comes_back_without_its_trailing_dot(hostname, host):
    assert _checked_host(hostname) == host


@pytest.mark.parametrize(
    ("hostname", "message"),
    [
        (None, "The URL has no host"),
        (".", "The URL has no host"),
        ("bad_label.example.edu", "'bad_label.example.edu' is not a valid host name"),
        ("-x.example.edu", "'-x.example.edu' is not a valid host name"),
        ("2130706433", "Write an IP address in its usual dotted form"),
        ("127.1", "Write an IP address in its usual dotted form"),
        ("0x7f.1", "Write an IP address in its usual dotted form"),
        ("fe80::1%eth0", "IPv6 zone identifiers are not allowed"),
    ],
)
def test_a_host_no_resolver_should_see_is_refused(hostname, message):
    with pytest.raises(Refused) as refused:
        _checked_host(hostname)
    assert (refused.value.code, refused.value.message) == ("invalid_url", message)


def _response(status=200, chunks=(b'{"keys": ', b"[]}"), **headers):
    return httpx.Response(status, headers=headers, stream=httpx.ByteStream(b"".join(chunks)))


def test_a_plain_answer_is_read_up_to_the_limit():
    assert _answer_body(_response(), max_bytes=12) == b'{"keys": []}'
    with pytest.raises(Refused) as refused:
        _answer_body(_response(), max_bytes=11)
    assert (refused.value.code, refused.value.message) == (
        "too_large",
        "The answer is larger than 11 bytes",
    )


@pytest.mark.parametrize(
    ("response", "code", "message"),
    [
        (_response(302, location="https://x/"), "redirect_not_allowed", "The URL redirected"),
        (_response(404), "http_error", "The URL answered 404"),
        (_response(**{"content-encoding": "gzip"}), "unreadable_content", "The answer is"),
    ],
)
def test_an_answer_other_than_a_plain_200_is_refused(response, code, message):
    with pytest.raises(Refused) as refused:
        _answer_body(response, max_bytes=1000)
    assert refused.value.code == code and refused.value.message.startswith(message)


def test_a_failed_fetch_is_refused_by_what_failed():
    timeout = _transport_refusal(httpx.ReadTimeout("slow"), 2.5)
    assert (timeout.code, timeout.message) == ("timeout", "No complete answer within 2.5 s")
    failed = _transport_refusal(httpx.ConnectError("refused"), 2.5)
    assert (failed.code, failed.message) == (
        "connection_failed",
        "Connection failed (ConnectError: refused)",
    )
    assert _transport_refusal(OSError("x" * 400), 1).message == (
        "Connection failed (" + ("OSError: " + "x" * 400)[:300] + ")"
    )


def test_an_untrusted_certificate_says_how_to_trust_it():
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_code = 20  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    cause.verify_message = "unable to get local issuer certificate"
    exc = httpx.ConnectError("tls")
    exc.__cause__ = cause
    refused = _transport_refusal(exc, 5)
    assert refused.code == "certificate_untrusted"
    assert refused.message.endswith("needs GATEWAY_EXTRA_CA_CERTS")

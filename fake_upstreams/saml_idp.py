"""A SAML 2.0 identity provider for the SAML tests (docs/saml.md): pysaml2's own IdP
(`saml2.server.Server`, IdentityPython's code, not this project's) behind a small HTTP server,
with a key pair made at start. `GET /metadata` is its metadata; `GET /sso` takes an
AuthnRequest (HTTP-Redirect binding) and answers the browser with an auto-submitting form that
posts the SAML Response to the SP's assertion consumer service, about the user queued with
`sign_in_next` (a queue, one per visit). `trust_sp(metadata_xml)` gives it the SP's metadata.

`sign_metadata` signs the metadata with the IdP's key (a federation's signature, for the
tests of its check). Switches for the hostile cases (`tamper`): "unsigned", "other_key"
(signed by a key not in the metadata), "response_signed" (the response signed, not the
assertion), "encrypted" (the assertion encrypted for the SP), "wrong_audience",
"wrong_destination", "wrong_in_response_to",
"xsw_beside" (a forged unsigned assertion beside the signed one), "xsw_wrap" (the signed one
wrapped inside the forged one), "xsw_extensions" (the signed one moved into the response's
Extensions, a forged one in its place), "billion_laughs", "external_entity". `last_response`
is the last SAMLResponse (base64) sent, for replays.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from html import escape
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import IdPConfig
from saml2.metadata import create_metadata_string
from saml2.saml import NAME_FORMAT_URI, NAMEID_FORMAT_PERSISTENT, NameID
from saml2.server import Server

from .server import FakeUpstream, RecordedRequest, Response

XMLSEC = "/usr/bin/xmlsec1"


def key_pair(common_name: str) -> tuple[str, str]:
    """An RSA key and a self-signed certificate, PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem.decode(), cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass
class SamlUser:
    uid: str
    attributes: dict[str, list[str]] = field(default_factory=dict)


class SamlIdpFake(FakeUpstream):
    name = "saml-idp"
    ROUTES = [("GET", r"/metadata", "metadata"), ("GET", r"/sso", "sso")]
    PUBLIC = frozenset({"metadata", "sso"})
    KNOBS = {"tamper": None, "sign_metadata": False}

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.mkdtemp(prefix="saml-idp-")
        self._paths: dict[str, str] = {}
        for label in ("idp", "other"):
            key, cert = key_pair(f"fake {label} IdP")
            for suffix, text in (("key", key), ("pem", cert)):
                path = os.path.join(self._dir, f"{label}.{suffix}")
                with open(path, "w") as handle:
                    handle.write(text)
                self._paths[f"{label}.{suffix}"] = path
        self._sp_metadata: list[str] = []
        self._next: list[SamlUser] = []
        self._state_lock = threading.Lock()
        self.last_response: str | None = None

    # -- configuration ---------------------------------------------------------------------

    @property
    def entity_id(self) -> str:
        return f"{self.origin}/metadata"

    @property
    def cert_pem(self) -> str:
        """The IdP's signing certificate (it signs its metadata too, with `sign_metadata`)."""
        with open(self._paths["idp.pem"]) as handle:
            return handle.read()

    def trust_sp(self, metadata_xml: str) -> None:
        """The SP's metadata (its ACS, its encryption certificate); several SPs may be known."""
        self._sp_metadata.append(metadata_xml)

    def sign_in_next(self, uid: str, /, **attributes: list[str] | str) -> None:
        values = {k: [v] if isinstance(v, str) else list(v) for k, v in attributes.items()}
        with self._state_lock:
            self._next.append(SamlUser(uid, values))

    def _reset_state(self) -> None:
        with self._state_lock:
            self._next.clear()
            self._sp_metadata.clear()
            self.last_response = None

    def server(self, signer: str = "idp") -> Server:
        config = IdPConfig()
        config.load(
            {
                "entityid": self.entity_id,
                "service": {
                    "idp": {
                        "endpoints": {
                            "single_sign_on_service": [
                                (f"{self.origin}/sso", BINDING_HTTP_REDIRECT)
                            ]
                        },
                        "policy": {
                            "default": {
                                "lifetime": {"minutes": 15},
                                "attribute_restrictions": None,
                                "name_form": NAME_FORMAT_URI,
                            }
                        },
                        "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                    }
                },
                "key_file": self._paths[f"{signer}.key"],
                "cert_file": self._paths[f"{signer}.pem"],
                "metadata": {"inline": list(self._sp_metadata)},
                "xmlsec_binary": XMLSEC,
            }
        )
        return Server(config=config)

    # -- endpoints ---------------------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return Response(status, (message or "error").encode(), [("content-type", "text/plain")])

    def metadata(self, request: RecordedRequest) -> Response:
        config = self.server().config
        text = create_metadata_string(None, config=config, valid=None, sign=self.sign_metadata)
        body = text if isinstance(text, bytes) else text.encode()
        return Response(200, body, [("content-type", "application/samlmetadata+xml")])

    def sso(self, request: RecordedRequest) -> Response:
        with self._state_lock:
            user = self._next.pop(0) if self._next else None
        if user is None:
            return self.error(403, "nobody queued to sign in")
        server = self.server()
        parsed = server.parse_authn_request(request.query["SAMLRequest"], BINDING_HTTP_REDIRECT)
        authn_request = parsed.message
        acs = authn_request.assertion_consumer_service_url
        text = self.response_xml(server, user, authn_request.id, acs, authn_request.issuer.text)
        encoded = base64.b64encode(text.encode()).decode()
        self.last_response = encoded
        return Response(200, _auto_post(acs, encoded).encode(), [("content-type", "text/html")])

    # -- the answer, as asked or tampered with -----------------------------------------------

    def response_xml(self, server: Server, user: SamlUser, request_id: str, acs: str, sp: str):
        tamper = self.tamper
        if tamper == "other_key":
            server = self.server("other")
        kwargs: dict[str, Any] = {
            "identity": user.attributes,
            "in_response_to": "id-not-asked" if tamper == "wrong_in_response_to" else request_id,
            "destination": "https://elsewhere.example/acs"
            if tamper == "wrong_destination"
            else acs,
            "sp_entity_id": "https://elsewhere.example/sp" if tamper == "wrong_audience" else sp,
            "name_id": NameID(format=NAMEID_FORMAT_PERSISTENT, text=user.uid),
            "authn": {"class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:Password"},
            "sign_assertion": tamper not in ("unsigned", "response_signed"),
            "sign_response": tamper == "response_signed",
        }
        if tamper == "encrypted":
            kwargs.update(encrypt_assertion=True, encrypt_cert_assertion=self._sp_cert(server, sp))
        text = str(server.create_authn_response(**kwargs))
        return _tampered(text, tamper)

    @staticmethod
    def _sp_cert(server: Server, sp: str) -> str:
        return server.metadata.certs(sp, "spsso", use="encryption")[0][1]


_ASSERTION = re.compile(r"<(\w+):Assertion\b.*?</\1:Assertion>", re.S)


def _forged(signed: str) -> str:
    """An unsigned copy of the assertion naming someone else, with another id."""
    forged = re.sub(r"<(\w+):Signature\b.*?</\1:Signature>", "", signed, flags=re.S)
    forged = re.sub(r'\bID="[^"]+"', 'ID="id-forged"', forged, count=1)
    return forged.replace("alice", "mallory")


def _tampered(text: str, tamper: str | None) -> str:
    if tamper in ("billion_laughs", "external_entity"):
        return _with_doctype(text, tamper)
    match = _ASSERTION.search(text)
    if tamper is None or match is None or not tamper.startswith("xsw_"):
        return text
    signed, saml = match.group(0), match.group(1)
    forged = _forged(signed)
    if tamper == "xsw_beside":
        replacement = forged + signed
    elif tamper == "xsw_wrap":
        # The signed assertion inside the forged one's Advice (after its Issuer).
        cut = forged.index(f"</{saml}:Issuer>") + len(f"</{saml}:Issuer>")
        replacement = forged[:cut] + f"<{saml}:Advice>{signed}</{saml}:Advice>" + forged[cut:]
    else:  # xsw_extensions: the signed one moved into the response's Extensions
        status = re.search(r"<(\w+):Status>", text)
        protocol = status.group(1) if status else "samlp"
        text = text.replace(signed, forged)
        extensions = f"<{protocol}:Extensions>{signed}</{protocol}:Extensions>"
        return text.replace(f"<{protocol}:Status>", extensions + f"<{protocol}:Status>", 1)
    return text[: match.start()] + replacement + text[match.end() :]


def _with_doctype(text: str, kind: str) -> str:
    body = text.split("?>", 1)[1] if text.startswith("<?xml") else text
    if kind == "billion_laughs":
        entities = '<!ENTITY lol "lol">' + "".join(
            f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
            for i in range(1, 10)
        )
        doctype, reference = f"<!DOCTYPE samlp:Response [{entities}]>", "&lol9;"
    else:
        doctype = '<!DOCTYPE samlp:Response [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        reference = "&xxe;"
    body = body.replace("alice", "alice" + reference, 1)
    return '<?xml version="1.0"?>' + doctype + body


def _auto_post(acs: str, saml_response: str) -> str:
    return (
        "<!DOCTYPE html><html><body onload='document.forms[0].submit()'>"
        f'<form method="post" action="{escape(acs)}">'
        f'<input type="hidden" name="SAMLResponse" value="{escape(saml_response)}">'
        '<noscript><button type="submit">Continue</button></noscript>'
        "</form></body></html>"
    )


__all__ = ["BINDING_HTTP_POST", "SamlIdpFake", "key_pair"]

"""SAML 2.0 sign-in with an institution's identity provider (docs/saml.md): the service
provider's side, on pysaml2 (docs/decisions/saml.md). The HTTP views are
licensing.signin.saml_views; what a verified assertion does to users and roles is the same as
for OpenID Connect (licensing.signin.sso.sign_in_complete), fed with a claims dict
(`claims_of`).

What is refused before pysaml2 reads a byte: an answer larger than MAX_RESPONSE, not base64,
with a DOCTYPE (entities, external entities: defusedxml), or not holding exactly one assertion
(encrypted or not) in the whole document - the signature wrapping attacks all need a second
one. pysaml2 then checks the signature (of the response or of the assertion, one at least),
the audience, the destination and recipient, InResponseTo against the pending request, and
the validity window; this module checks the window again with its injectable clock, the
issuer, and that the assertion id was never used before (kept until its NotOnOrAfter).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import defusedxml.ElementTree as SafeET
import saml2.cryptography.asymmetric
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from defusedxml import DefusedXmlException
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.client import Saml2Client
from saml2.config import SPConfig
from saml2.metadata import create_metadata_string
from saml2.sigver import SigverError, security_context

from core.config import get_config
from core.crypto import reveal
from core.outbound import Refused, fetch_outbound_bytes, validate_outbound_url
from core.text import is_storable_text

from ..models import IdentityProvider, SamlAssertionUse

logger = logging.getLogger("gateway")

MAX_RESPONSE = 256 * 1024  # base64 characters of a SAMLResponse
MAX_METADATA = 8 * 1024 * 1024  # a federation's aggregate is larger: give the IdP's own URL
METADATA_TIMEOUT = 10.0
METADATA_LIFESPAN = 6 * 3600  # seconds a fetched metadata document is used
METADATA_RETRY = 60  # seconds between two failed fetches
SLACK = 120  # seconds of clock difference accepted with the IdP
MAX_VALUES = 200  # values of one attribute looked at
MAX_VALUE_LENGTH = 255

# pysaml2 reads the SP's private key from its file each time a client is configured (several
# times a sign-in), and cryptography checks an RSA key's consistency on every load: ~0.17 s of
# CPU for a 3072-bit key, about half a second a sign-in. The keys are the gateway's own
# (sp_key_pair_new, stored encrypted), so each distinct key is loaded and checked once per
# process (docs/decisions/saml.md).
_load_pem_private_key = saml2.cryptography.asymmetric.load_pem_private_key


@functools.lru_cache(maxsize=256)
def _private_key_loaded_once(data: bytes, password: bytes | None = None):
    return _load_pem_private_key(data, password)


saml2.cryptography.asymmetric.load_pem_private_key = _private_key_loaded_once

NS_ASSERTION = "urn:oasis:names:tc:SAML:2.0:assertion"
NS_PROTOCOL = "urn:oasis:names:tc:SAML:2.0:protocol"
NS_METADATA = "urn:oasis:names:tc:SAML:2.0:metadata"

# Injectable for tests (no test waits for the wall clock).
clock = time.time


class SamlError(Exception):
    """An answer or a metadata document that signs nobody in: `reason` (audit), `message`."""

    def __init__(self, reason: str, message: str, *, status: int = 403):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status


# --- URLs and the SP's key pair ----------------------------------------------------------------


def _base(base_url: str | None) -> str:
    return (base_url or get_config().GATEWAY_PUBLIC_URL).rstrip("/")


def sp_entity_id(provider_id: int, base_url: str | None = None) -> str:
    """The SP's entityID: its metadata URL (one SP per provider)."""
    return _base(base_url) + reverse("saml-metadata", args=[provider_id])


def acs_url_of(provider_id: int, base_url: str | None = None) -> str:
    return _base(base_url) + reverse("saml-acs", args=[provider_id])


def sp_key_pair_new(common_name: str) -> tuple[str, str]:
    """A new RSA key and its self-signed certificate (10 years: SAML metadata pins the
    certificate itself, its dates are not checked), both PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return key_pem, cert.public_bytes(serialization.Encoding.PEM).decode()


# --- the IdP's metadata -------------------------------------------------------------------------


def safe_xml(text: str | bytes, what: str):
    """The parsed document, or SamlError: no DTD at all (entity expansion, external entities)."""
    try:
        return SafeET.fromstring(text, forbid_dtd=True)
    except (DefusedXmlException, SafeET.ParseError, ValueError) as exc:
        raise SamlError(
            "saml_xml_refused", f"The {what} is not acceptable XML ({type(exc).__name__})"
        ) from exc


def checked_metadata(provider: IdentityProvider, text: str) -> str:
    """The IdP metadata when it describes the provider's IdP (and is signed by the federation
    when its certificate is set), else SamlError `metadata_invalid`."""
    root = safe_xml(text, "IdP metadata")
    entity = None
    if root.tag == f"{{{NS_METADATA}}}EntityDescriptor":
        entity = root if root.get("entityID") == provider.issuer else None
    elif root.tag == f"{{{NS_METADATA}}}EntitiesDescriptor":
        entity = next(
            (
                e
                for e in root.iter(f"{{{NS_METADATA}}}EntityDescriptor")
                if e.get("entityID") == provider.issuer
            ),
            None,
        )
    if entity is None or entity.find(f"{{{NS_METADATA}}}IDPSSODescriptor") is None:
        raise SamlError(
            "metadata_invalid",
            gettext_noop("The IdP metadata does not describe this IdP"),
            status=502,
        )
    if provider.saml_federation_cert:
        _federation_signature_check(text, root.tag, provider.saml_federation_cert)
    return text


def _federation_signature_check(text: str, root_tag: str, cert_pem: str) -> None:
    namespace, tag = root_tag[1:].split("}")
    with _files({"federation.pem": cert_pem}) as paths:
        sec = security_context(_bare_config())
        try:
            ok = sec.verify_signature(
                text, cert_file=paths["federation.pem"], node_name=f"{namespace}:{tag}"
            )
        except Exception:  # noqa: BLE001 (xmlsec's failures are many; none is a pass)
            ok = False
    if not ok:
        raise SamlError(
            "metadata_signature",
            gettext_noop("The IdP metadata is not signed by the federation's certificate"),
            status=502,
        )


@dataclass
class _Entry:
    text: str | None = None
    fetched_at: float | None = None
    tried_at: float | None = None
    error: SamlError | None = None


class MetadataCache:
    """IdP metadata per URL, refreshed after METADATA_LIFESPAN; `clock` and `fetch`
    injectable. An old good document beats none when a refresh fails."""

    def __init__(self, clock=time.monotonic, fetch=None):
        self.clock = clock
        self.fetch = fetch or (
            lambda url: fetch_outbound_bytes(
                url, max_bytes=MAX_METADATA, timeout=METADATA_TIMEOUT, accept="application/xml"
            ).decode("utf-8")
        )
        self._entries: dict[tuple[int, str], _Entry] = {}
        self._lock = threading.Lock()

    def metadata_for(self, provider: IdentityProvider) -> str:
        if not provider.saml_metadata_url:
            return checked_metadata(provider, provider.saml_metadata_xml)
        with self._lock:
            entry = self._entries.setdefault((provider.pk, provider.saml_metadata_url), _Entry())
            now = self.clock()
            if entry.text is not None and now - (entry.fetched_at or 0) < METADATA_LIFESPAN:
                return entry.text
            if entry.tried_at is not None and now - entry.tried_at < METADATA_RETRY:
                return self._stale(entry)
            entry.tried_at = now
            try:
                entry.text = checked_metadata(provider, self._fetched(provider))
            except SamlError as exc:
                logger.warning("SAML metadata of provider %s: %s", provider.pk, exc.message)
                entry.error = exc
                return self._stale(entry)
            entry.fetched_at, entry.error = now, None
            return entry.text

    def _fetched(self, provider: IdentityProvider) -> str:
        try:
            return self.fetch(provider.saml_metadata_url)
        except (Refused, UnicodeDecodeError) as exc:
            message = exc.message if isinstance(exc, Refused) else "not UTF-8"
            raise SamlError(
                "idp_unavailable", f"The IdP metadata could not be fetched: {message}", status=502
            ) from exc

    @staticmethod
    def _stale(entry: _Entry) -> str:
        if entry.text is not None:
            return entry.text
        raise entry.error or SamlError(
            "idp_unavailable", gettext_noop("The IdP is not reachable"), status=502
        )

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


metadata_cache = MetadataCache()


# --- pysaml2's client, configured per provider ------------------------------------------------


@contextmanager
def _files(contents: dict[str, str]) -> Iterator[dict[str, str]]:
    """Files for xmlsec1 (it reads keys and certificates from files only): in a private
    directory, removed on leaving."""
    with tempfile.TemporaryDirectory(prefix="saml-") as directory:
        paths = {}
        for name, text in contents.items():
            path = os.path.join(directory, name)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
                handle.write(text)
            paths[name] = path
        yield paths


def _bare_config() -> SPConfig:
    config = SPConfig()
    config.load(
        {"entityid": "urn:gateway:metadata-check", "xmlsec_binary": get_config().GATEWAY_XMLSEC1}
    )
    return config


def _sp_settings(provider: IdentityProvider, paths: dict[str, str], idp_metadata: str | None):
    sp = {
        "endpoints": {"assertion_consumer_service": [(acs_url_of(provider.pk), BINDING_HTTP_POST)]},
        "want_response_signed": False,
        "want_assertions_signed": False,
        "want_assertions_or_response_signed": True,
        "authn_requests_signed": False,
        "allow_unsolicited": False,
        "name_id_format_allow_create": True,
        "required_attributes": ["eduPersonPrincipalName", "mail"],
        "optional_attributes": [
            "displayName",
            "eduPersonAffiliation",
            "eduPersonEntitlement",
            "memberOf",
        ],
    }
    settings: dict[str, Any] = {
        "entityid": sp_entity_id(provider.pk),
        "service": {"sp": sp},
        "key_file": paths["sp.key"],
        "cert_file": paths["sp.pem"],
        "encryption_keypairs": [{"key_file": paths["sp.key"], "cert_file": paths["sp.pem"]}],
        "xmlsec_binary": get_config().GATEWAY_XMLSEC1,
        "allow_unknown_attributes": True,
        "accepted_time_diff": SLACK,
        "delete_tmpfiles": True,
    }
    if idp_metadata is not None:
        settings["metadata"] = {"inline": [idp_metadata]}
    return settings


@contextmanager
def saml_client(provider: IdentityProvider, *, with_idp: bool = True) -> Iterator[Saml2Client]:
    """pysaml2's SP for this provider (its key on a private file while in use)."""
    idp_metadata = metadata_cache.metadata_for(provider) if with_idp else None
    keys = {"sp.key": reveal(provider.saml_sp_key), "sp.pem": provider.saml_sp_cert}
    with _files(keys) as paths:
        config = SPConfig()
        config.load(_sp_settings(provider, paths, idp_metadata))
        yield Saml2Client(config=config)


def sp_metadata(provider: IdentityProvider) -> str:
    """The SP's metadata to give the IdP (its ACS, its certificate for encryption)."""
    keys = {"sp.key": reveal(provider.saml_sp_key), "sp.pem": provider.saml_sp_cert}
    with _files(keys) as paths:
        config = SPConfig()
        config.load(_sp_settings(provider, paths, None))
        text = create_metadata_string(None, config=config, valid=None, sign=False)
    return text.decode() if isinstance(text, bytes) else text


def login_redirect(provider: IdentityProvider) -> tuple[str, str]:
    """A new AuthnRequest (HTTP-Redirect binding): its id and the IdP URL to send the browser."""
    with saml_client(provider) as client:
        request_id, info = client.prepare_for_authenticate(
            entityid=provider.issuer, binding=BINDING_HTTP_REDIRECT
        )
    location = dict(info["headers"])["Location"]
    return request_id, location


# --- the answer ----------------------------------------------------------------------------


def response_precheck(saml_response: str, acs_url: str) -> None:
    """What is refused before pysaml2 reads the answer (see the module's doc)."""
    if not isinstance(saml_response, str) or not saml_response:
        raise SamlError(
            "saml_no_response", gettext_noop("The answer holds no SAMLResponse"), status=400
        )
    if len(saml_response) > MAX_RESPONSE:
        raise SamlError("saml_too_large", gettext_noop("The SAMLResponse is too large"), status=400)
    try:
        xml = base64.b64decode(saml_response.encode("ascii"), validate=False)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise SamlError("saml_not_base64", "The SAMLResponse is not base64", status=400) from exc
    root = safe_xml(xml, "SAMLResponse")
    if root.tag != f"{{{NS_PROTOCOL}}}Response":
        raise SamlError(
            "saml_not_response", gettext_noop("The SAMLResponse is not a Response"), status=400
        )
    if root.get("Destination") not in (None, acs_url):
        raise SamlError(
            "saml_destination", gettext_noop("The SAML answer was sent to another destination")
        )
    found = len(list(root.iter(f"{{{NS_ASSERTION}}}Assertion"))) + len(
        list(root.iter(f"{{{NS_ASSERTION}}}EncryptedAssertion"))
    )
    if found != 1:
        raise SamlError(
            "saml_assertion_count",
            gettext_noop(
                "The SAMLResponse must hold exactly one assertion (signature wrapping refused)"
            ),
        )


# pysaml2's exceptions by class name, as the reasons of the audit rows.
_REASONS = {
    "SignatureError": "saml_signature",
    "SigverError": "saml_signature",
    "IncorrectlySigned": "saml_signature",
    "MissingKey": "saml_signature",
    "DecryptError": "saml_decrypt",
    "ToEarly": "saml_not_yet_valid",
    "ResponseLifetimeExceed": "saml_expired",
    "UnsolicitedResponse": "saml_in_response_to",
    "OtherError": "saml_destination",
    "StatusError": "saml_idp_status",
}


_MESSAGES = {
    "saml_signature": gettext_noop(
        "The answer of the identity provider is not signed, or not by its key."
    ),
    "saml_decrypt": gettext_noop("The encrypted assertion could not be decrypted."),
    "saml_not_yet_valid": gettext_noop("The assertion is not valid yet."),
    "saml_expired": gettext_noop("The assertion has expired."),
    "saml_in_response_to": gettext_noop("The SAML answer is not for this sign-in."),
    "saml_destination": gettext_noop("The SAML answer was sent to another destination."),
    "saml_idp_status": gettext_noop("The identity provider refused the sign-in."),
    "saml_invalid": gettext_noop(
        "The SAML answer is not acceptable (audience, recipient or conditions)."
    ),
}


def _pysaml2_refusal(exc: Exception) -> SamlError:
    """pysaml2's exception as a reason and a message for people; its detail (which may hold
    the whole document) only in the log."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    reason = next((_REASONS[n] for n in names if n in _REASONS), "saml_invalid")
    logger.warning("SAML answer refused by pysaml2 (%s): %s", reason, f"{exc!r}"[:500])
    return SamlError(reason, _MESSAGES[reason])


def verified_assertion(provider: IdentityProvider, saml_response: str, request_id: str):
    """pysaml2's verdict on the answer to the pending AuthnRequest, then ours (the clock, the
    issuer); the AuthnResponse, or SamlError."""
    response_precheck(saml_response, acs_url_of(provider.pk))
    with saml_client(provider) as client:
        try:
            answer = client.parse_authn_request_response(
                saml_response, BINDING_HTTP_POST, outstanding={request_id: "/"}
            )
        except SamlError:
            raise
        except (Exception, SigverError) as exc:  # noqa: BLE001 (pysaml2 raises many kinds)
            raise _pysaml2_refusal(exc) from exc
    if answer is None or answer.assertion is None:
        raise SamlError("saml_invalid", gettext_noop("The SAML answer holds no valid assertion"))
    if answer.in_response_to != request_id:
        raise SamlError(
            "saml_in_response_to", gettext_noop("The SAML answer is not for this sign-in")
        )
    _issuer_check(provider, answer)
    _window_check(answer.assertion, now=clock())
    return answer


def _issuer_check(provider: IdentityProvider, answer) -> None:
    issuer = answer.assertion.issuer.text if answer.assertion.issuer is not None else None
    if (issuer or "").strip() != provider.issuer:
        raise SamlError("saml_issuer", gettext_noop("The assertion was issued by another IdP"))


def _window_check(assertion, *, now: float) -> None:
    """The assertion's validity window by our clock (pysaml2 checked it by the system's)."""
    conditions = assertion.conditions
    not_before = _epoch(getattr(conditions, "not_before", None)) or _epoch(assertion.issue_instant)
    not_after = _epoch(getattr(conditions, "not_on_or_after", None))
    if not_before is not None and now + SLACK < not_before:
        raise SamlError("saml_not_yet_valid", gettext_noop("The assertion is not valid yet"))
    if not_after is not None and now - SLACK >= not_after:
        raise SamlError("saml_expired", gettext_noop("The assertion has expired"))


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return _utc_seconds(stamp)
    except (ValueError, TypeError):
        return None


def _utc_seconds(stamp: str) -> float:
    text = stamp.strip().replace("Z", "+00:00")
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def assertion_use_record(provider: IdentityProvider, answer) -> None:
    """The assertion id kept until its NotOnOrAfter; a second use is SamlError `saml_replay`.
    Expired ids are dropped on the way."""
    assertion = answer.assertion
    conditions = assertion.conditions
    expires = _epoch(getattr(conditions, "not_on_or_after", None)) or clock() + 3600
    try:
        with transaction.atomic():
            SamlAssertionUse.objects.filter(expires_at__lt=timezone.now()).delete()
            SamlAssertionUse.objects.create(
                provider=provider,
                assertion_id=str(assertion.id)[:255],
                expires_at=datetime.datetime.fromtimestamp(expires + SLACK, datetime.UTC),
            )
    except IntegrityError as exc:
        raise SamlError(
            "saml_replay", gettext_noop("This assertion was used before (replay refused)")
        ) from exc


# --- attributes -> claims ----------------------------------------------------------------------

# The subject, by preference: SAML subject-id, pairwise-id, then eduPersonPrincipalName.
SUBJECT_ATTRIBUTES = (
    "urn:oasis:names:tc:SAML:attribute:subject-id",
    "subject-id",
    "urn:oasis:names:tc:SAML:attribute:pairwise-id",
    "pairwise-id",
    "eduPersonPrincipalName",
)
GROUP_ATTRIBUTES = ("memberOf", "eduPersonEntitlement", "eduPersonAffiliation")


def _values(ava: dict[str, Any], name: str) -> list[str]:
    raw = ava.get(name) or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [
        v
        for v in raw[:MAX_VALUES]
        if isinstance(v, str) and 0 < len(v) <= MAX_VALUE_LENGTH and is_storable_text(v)
    ]


def claims_of(provider: IdentityProvider, ava: dict[str, Any]) -> dict[str, Any]:
    """The SAML attributes as the claims sso.sign_in_complete reads: `sub`, `email` (an
    institution's IdP asserts its own addresses: verified), `name`, and the groups claim made
    of memberOf, eduPersonEntitlement and eduPersonAffiliation (what group mappings read), and
    each attribute by its own name (what access rules may read). SamlError when no subject is
    usable."""
    sub = next((v[0] for n in SUBJECT_ATTRIBUTES if (v := _values(ava, n))), None)
    if sub is None:
        raise SamlError(
            "saml_no_subject",
            gettext_noop(
                "The IdP sent no usable subject-id, pairwise-id or eduPersonPrincipalName"
            ),
        )
    claims: dict[str, Any] = {"sub": sub}
    mail = _values(ava, "mail")
    if mail:
        claims["email"], claims["email_verified"] = mail[0], True
    name = _values(ava, "displayName")
    if name:
        claims["name"] = name[0]
    groups: list[str] = []
    for attribute in GROUP_ATTRIBUTES:
        for group in _values(ava, attribute):
            if group not in groups:
                groups.append(group)
    claims[provider.groups_claim] = groups
    # Every attribute by its name as well, for access rules on them ("eduPersonAffiliation
    # contains student"); the rules check the values of those they read (access_rules).
    for attribute, values in ava.items():
        if isinstance(attribute, str) and attribute not in claims:
            claims[attribute] = values
    return claims


# --- configuration (the command and the admin's form) -----------------------------------------


@dataclass(frozen=True)
class SamlSource:
    """Where the IdP's metadata comes from: a URL (fetched, refreshed) or the XML itself."""

    metadata_url: str = ""
    metadata_xml: str = ""
    entity_id: str = ""  # needed when the metadata describes several IdPs (a federation's)
    federation_cert: str = ""


@dataclass(frozen=True)
class CheckedSource:
    """A source whose metadata passed `saml_source_checked`: the text and the IdP's entityID
    saml_provider_configure stores (the admin's form checks first, then saves what it checked)."""

    source: SamlSource
    text: str
    entity_id: str


def _refused(field: str, message, **params) -> ValidationError:
    """A refusal about one of SamlSource's fields: the form shows it on that field, the
    command prints it."""
    return ValidationError({field: ValidationError(message, params=params or None)})


def saml_source_checked(source: SamlSource) -> CheckedSource:
    """The metadata fetched through the outbound guard (or as given), parsed without any DTD,
    describing the named IdP (or exactly one), signed by the federation when its certificate
    is given. ValidationError keyed by the SamlSource field at fault."""
    if bool(source.metadata_url) == bool(source.metadata_xml):
        raise _refused("metadata_url", _("Give the metadata URL or the metadata XML, one of them."))
    where = "metadata_url" if source.metadata_url else "metadata_xml"
    if source.federation_cert:
        _certificate_check(source.federation_cert)
    text = _metadata_text(source, where)
    entity_id = _entity_id_of(source, text, where)
    probe = IdentityProvider(issuer=entity_id, saml_federation_cert=source.federation_cert)
    try:
        checked_metadata(probe, text)
    except SamlError as exc:
        field = "entity_id" if source.entity_id else where
        if exc.reason == "metadata_signature":
            field = "federation_cert"
        raise _refused(field, _(exc.message)) from exc  # the messages are marked where raised
    return CheckedSource(source, text, entity_id)


def _certificate_check(pem: str) -> None:
    try:
        x509.load_pem_x509_certificate(pem.encode("utf-8"))
    except ValueError as exc:  # UnicodeEncodeError is a ValueError
        raise _refused(
            "federation_cert", _("The federation certificate is not a PEM certificate.")
        ) from exc


def _metadata_text(source: SamlSource, where: str) -> str:
    text = source.metadata_xml
    if source.metadata_url:
        try:
            validate_outbound_url(source.metadata_url)
            text = metadata_cache.fetch(source.metadata_url)
        except Refused as exc:
            raise _refused(
                "metadata_url", _("The metadata URL is refused: %(reason)s"), reason=exc.message
            ) from exc
        except UnicodeDecodeError as exc:
            raise _refused("metadata_url", _("The metadata at this URL is not UTF-8.")) from exc
    if not is_storable_text(text):
        raise _refused(where, _("The metadata holds a NUL or a lone surrogate."))
    try:
        safe_xml(text, "IdP metadata")
    except SamlError as exc:
        raise _refused(
            where, _("The metadata is not acceptable XML (a DTD or entities are refused).")
        ) from exc
    return text


def _entity_id_of(source: SamlSource, text: str, where: str) -> str:
    from . import sso

    if source.entity_id:
        try:
            return sso._text(source.entity_id, "The entityID", 500, required=True)
        except ValidationError as exc:
            raise ValidationError({"entity_id": exc.messages}) from exc
    root = safe_xml(text, "IdP metadata")
    idps = [
        e.get("entityID", "")
        for e in root.iter(f"{{{NS_METADATA}}}EntityDescriptor")
        if e.find(f"{{{NS_METADATA}}}IDPSSODescriptor") is not None
    ]
    if len(idps) != 1:
        field = "entity_id" if idps else where
        raise _refused(
            field,
            _("The metadata describes %(count)s IdPs: give the entity id of yours."),
            count=len(idps),
        )
    return idps[0][:500]


def saml_provider_configure(
    *,
    institution,
    source: SamlSource,
    mapping: dict[str, Any],
    checked: CheckedSource | None = None,
    actor=None,
    request=None,
) -> IdentityProvider:
    """Create or update the institution's provider as a SAML one: the source checked by
    `saml_source_checked` (unless `checked` is its verdict on this very source), the SP's key
    pair made once. `mapping` holds configure_sso's role, license and rules options."""
    from . import sso

    if checked is None or checked.source != source:
        checked = saml_source_checked(source)
    with transaction.atomic():
        provider, created = sso._provider_for_update(institution, checked.entity_id)
        provider.protocol = IdentityProvider.Protocol.SAML
        provider.issuer, provider.client_id = checked.entity_id, ""
        provider.saml_metadata_url = source.metadata_url
        provider.saml_metadata_xml = "" if source.metadata_url else checked.text
        provider.saml_federation_cert = source.federation_cert
        if not provider.saml_sp_cert:
            provider.saml_sp_key, provider.saml_sp_cert = sp_key_pair_new(institution.name)
        mapped = sso.provider_mapping_set(provider, mapping, institution=institution)
        provider.save()
        sso._provider_configured_record(
            institution,
            provider,
            created,
            mapped,
            actor=actor,
            request=request,
            command="manage.py configure_saml",
        )
    metadata_cache.clear()
    logger.info("SAML provider %s for %s: %s", provider.pk, institution, checked.entity_id)
    return provider

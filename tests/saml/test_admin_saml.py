"""A SAML provider added and changed in the admin (licensing.signin.admin_sso): the same checks
as configure_saml (saml.saml_source_checked), each refusal on its field and nothing saved; the
SP's key pair made once and never shown; superusers only; the OpenID Connect form unchanged."""

from __future__ import annotations

import httpx
import pytest
from django.db import connection
from django.test import Client

from core.crypto import reveal
from fake_upstreams.saml_idp import key_pair
from licensing.access.services import license_create
from licensing.models import AdminProfile, AuditEvent, IdentityProvider, Institution

ADD = "/admin/licensing/identityprovider/add/"
ADD_SAML = ADD + "?protocol=saml"


def change_url(provider) -> str:
    return f"/admin/licensing/identityprovider/{provider.pk}/change/"


@pytest.fixture
def root(db, django_user_model) -> Client:
    browser = Client()
    browser.force_login(django_user_model.objects.create_superuser("root", "r@example.org", "x"))
    return browser


@pytest.fixture
def gamma(db):
    return license_create(
        name="Gamma students", institution="Gamma School", limit=1000, strategy="per_user"
    )


def form(license, **fields) -> dict:
    """What the SAML add page posts: the metadata source and the shared options."""
    return {
        "institution": str(license.institution.pk),
        "saml_metadata_url": "",
        "saml_metadata_xml": "",
        "issuer": "",
        "saml_federation_cert": "",
        "groups_claim": "groups",
        "admin_groups": '["gamma-admins"]',
        "reviewer_groups": "[]",
        "teacher_groups": "[]",
        "student_groups": '["student"]',
        "student_license": str(license.pk),
        "access_rules": "[]",
        "email_domains": "gamma.example.edu",
        "active": "on",
        **fields,
    }


def field_errors(answer, name: str) -> list[str]:
    assert answer.status_code == 200, answer.content[:2000]
    return list(answer.context["adminform"].form.errors.get(name, []))


def test_add_page_offers_both_protocols(root):
    oidc = root.get(ADD).content.decode()
    assert 'name="protocol" value="saml"' in oidc and 'name="client_id"' in oidc
    assert "saml_metadata_url" not in oidc
    saml_page = root.get(ADD_SAML).content.decode()
    assert 'value="saml" checked' in saml_page
    for name in ("saml_metadata_url", "saml_metadata_xml", "issuer", "saml_federation_cert"):
        assert f'name="{name}"' in saml_page
    assert 'name="client_id"' not in saml_page and 'name="client_secret"' not in saml_page


def test_add_from_pasted_metadata_then_change(root, gamma, idp):
    metadata = httpx.get(idp.entity_id).text
    answer = root.post(ADD_SAML, form(gamma, saml_metadata_xml=metadata))
    assert answer.status_code == 302, answer.content[:3000]
    provider = IdentityProvider.objects.get(institution=gamma.institution)
    assert provider.protocol == "saml" and provider.issuer == idp.entity_id
    assert provider.client_id == "" and provider.saml_metadata_url == ""
    assert "IDPSSODescriptor" in provider.saml_metadata_xml
    assert provider.student_groups == ["student"] and provider.student_license == gamma
    assert reveal(provider.saml_sp_key).startswith("-----BEGIN PRIVATE KEY-----")
    with connection.cursor() as cursor:  # sealed at rest, as the command leaves it
        cursor.execute("SELECT saml_sp_key FROM licensing_identityprovider")
        assert "PRIVATE" not in cursor.fetchone()[0]
    event = AuditEvent.objects.get(action=AuditEvent.Action.SSO_CONFIGURED)
    assert event.actor is not None and event.actor.username == "root"

    page = root.get(change_url(provider)).content.decode()
    assert f"/sso/{provider.pk}/saml/metadata/" in page and f"/sso/{provider.pk}/saml/acs/" in page
    assert "PRIVATE KEY" not in page and "BEGIN CERTIFICATE" not in page  # the SP's pair
    assert 'name="_save"' in page and 'name="client_id"' not in page

    certificate = provider.saml_sp_cert
    changed = form(gamma, saml_metadata_xml=metadata, issuer=idp.entity_id,
                   admin_groups="[]", student_groups="[]", teacher_groups='["faculty"]',
                   sso_only="on")  # fmt: skip
    del changed["institution"]  # read-only once saved
    answer = root.post(change_url(provider), changed)
    assert answer.status_code == 302, answer.content[:3000]
    provider.refresh_from_db()
    assert provider.teacher_groups == ["faculty"] and provider.admin_groups == []
    assert provider.sso_only is True
    assert provider.saml_sp_cert == certificate  # the key pair is made once


def test_add_by_metadata_url(root, gamma, idp):
    answer = root.post(ADD_SAML, form(gamma, saml_metadata_url=idp.entity_id))
    assert answer.status_code == 302, answer.content[:3000]
    provider = IdentityProvider.objects.get()
    assert provider.saml_metadata_url == idp.entity_id and provider.saml_metadata_xml == ""


def test_save_and_add_another_opens_the_saml_add_page_again(root, gamma, idp):
    answer = root.post(ADD_SAML, form(gamma, saml_metadata_url=idp.entity_id, _addanother="1"))
    assert answer.status_code == 302, answer.content[:3000]
    assert answer["Location"] == ADD_SAML
    provider = IdentityProvider.objects.get()
    changed = form(gamma, saml_metadata_url=idp.entity_id, _addanother="1")
    del changed["institution"]
    answer = root.post(change_url(provider) + "?_changelist_filters=active__exact%3D1", changed)
    assert answer.status_code == 302, answer.content[:3000]
    assert answer["Location"].startswith(ADD + "?_changelist_filters=")
    assert answer["Location"].endswith("&protocol=saml")
    assert 'value="saml" checked' in root.get(answer["Location"]).content.decode()


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/metadata", "http://10.0.0.1/idp.xml", "ftp://idp.example/"]
)
def test_metadata_url_refused_by_the_guard(root, gamma, url):
    answer = root.post(ADD_SAML, form(gamma, saml_metadata_url=url))
    assert any("refused" in e for e in field_errors(answer, "saml_metadata_url"))
    assert not IdentityProvider.objects.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>', "DTD"),
        ('<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>', "DTD"),
        ("<not-metadata/>", "0 IdPs"),
        ("<EntityDescriptor", "not acceptable XML"),
        ("<x>\x00</x>", "Null characters"),
    ],
    ids=["entities", "external_entity", "not_metadata", "broken", "nul"],
)
def test_hostile_metadata_is_a_field_error(root, gamma, text, expected):
    answer = root.post(ADD_SAML, form(gamma, saml_metadata_xml=text))
    errors = field_errors(answer, "saml_metadata_xml")
    assert any(expected in e for e in errors), errors
    assert not IdentityProvider.objects.exists()


def test_source_is_one_of_url_or_xml(root, gamma, idp):
    neither = root.post(ADD_SAML, form(gamma))
    assert field_errors(neither, "saml_metadata_url")
    both = root.post(
        ADD_SAML, form(gamma, saml_metadata_url=idp.entity_id, saml_metadata_xml="<x/>")
    )
    assert field_errors(both, "saml_metadata_url")
    assert not IdentityProvider.objects.exists()


def test_entity_id_and_federation_certificate_checked(root, gamma, idp):
    metadata = httpx.get(idp.entity_id).text
    other = root.post(ADD_SAML, form(gamma, saml_metadata_xml=metadata, issuer="urn:other:idp"))
    assert any("does not describe" in e for e in field_errors(other, "issuer"))
    _, wrong_cert = key_pair("not the federation")
    unsigned = root.post(
        ADD_SAML, form(gamma, saml_metadata_url=idp.entity_id, saml_federation_cert=wrong_cert)
    )
    assert any("not signed" in e for e in field_errors(unsigned, "saml_federation_cert"))
    garbage = root.post(
        ADD_SAML, form(gamma, saml_metadata_xml=metadata, saml_federation_cert="not a cert")
    )
    assert any("PEM" in e for e in field_errors(garbage, "saml_federation_cert"))
    foreign = license_create(name="Foreign", institution="Delta College")
    license = root.post(ADD_SAML, {**form(gamma, saml_metadata_xml=metadata),
                                   "student_license": str(foreign.pk)})  # fmt: skip
    assert field_errors(license, "student_license")
    assert not IdentityProvider.objects.exists()


def test_signed_metadata_with_the_federation_certificate(root, gamma, idp):
    idp.sign_metadata = True
    answer = root.post(
        ADD_SAML, form(gamma, saml_metadata_url=idp.entity_id, saml_federation_cert=idp.cert_pem)
    )
    assert answer.status_code == 302, answer.content[:3000]
    assert IdentityProvider.objects.get().saml_federation_cert == idp.cert_pem.strip()


def test_institution_admins_never_reach_a_saml_provider(alpha, django_user_model):
    """Only superusers configure sign-in (as for OpenID Connect): an institution's own admin
    is refused its provider's page, and nothing changes."""
    staff = django_user_model.objects.create_user("alpha-admin", password="x", is_staff=True)
    AdminProfile.objects.create(user=staff, institution=alpha.institution, role="admin")
    browser = Client()
    browser.force_login(staff)
    url = change_url(alpha.provider)
    assert browser.get(url).status_code in (302, 403)
    assert browser.post(url, {"issuer": "urn:evil", "sso_only": "on"}).status_code in (302, 403)
    assert browser.get(ADD_SAML).status_code in (302, 403)
    alpha.provider.refresh_from_db()
    assert alpha.provider.issuer != "urn:evil" and alpha.provider.sso_only is False


def test_oidc_provider_page_unchanged(root):
    institution = Institution.objects.create(name="Epsilon")
    provider = IdentityProvider.objects.create(
        institution=institution, issuer="https://idp.epsilon.example", client_id="e"
    )
    page = root.get(change_url(provider)).content.decode()
    assert 'name="client_id"' in page and f"/sso/{provider.pk}/callback/" in page
    assert "saml_metadata" not in page and 'name="protocol"' not in page

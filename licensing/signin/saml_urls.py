"""/sso/<provider id>/saml/'s URLs (gateway_site.urls includes them lazily: pysaml2 is imported
on the first SAML request, not by every worker at start)."""

from django.urls import path

from . import saml_views

urlpatterns = [
    path("login/", saml_views.saml_login, name="saml-login"),
    path("acs/", saml_views.saml_acs, name="saml-acs"),
    path("metadata/", saml_views.saml_metadata, name="saml-metadata"),
]

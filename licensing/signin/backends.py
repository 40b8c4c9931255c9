"""The password backend of the admin's login form: Django's ModelBackend, refusing the users
of an institution whose identity provider is `sso_only` (docs/sso.md). Superusers keep their
password whatever their institution (break-glass). django-axes' backend stays in front of it
(gateway_site/settings.py AUTHENTICATION_BACKENDS)."""

from __future__ import annotations

import logging

from django.contrib.auth.backends import ModelBackend

from .sso import sign_in_refusal_record, sso_only_provider_of

logger = logging.getLogger("gateway")

BACKEND = "licensing.signin.backends.GatewayModelBackend"


class GatewayModelBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        # The password is checked first: the SSO-only message is shown to whoever knows it,
        # never to a guesser (who learns nothing about the account).
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None or user.is_superuser:
            return user
        provider = sso_only_provider_of(user)
        if provider is None:
            return user
        if request is not None:
            request.sso_only_institution = provider.institution.name
        sign_in_refusal_record(
            reason="sso_only",
            message="A local password of an institution that signs in with its IdP only",
            request=request,
            provider=provider,
            who=user.get_username(),
        )
        return None

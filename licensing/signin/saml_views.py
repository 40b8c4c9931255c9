"""The SAML 2.0 sign-in pages (docs/saml.md). The URL contract: `GET /sso/<provider
id>/saml/metadata/` (the SP's metadata, to register at the IdP), `GET /sso/<provider
id>/saml/login/?next=<path>` (an AuthnRequest, HTTP-Redirect binding; `/sso/<id>/login/`
comes here for a SAML provider), `POST /sso/<provider id>/saml/acs/` (the assertion consumer
service, HTTP-POST binding).

The pending request (its id, provider, next, when) lives in the session and is used once,
like OpenID Connect's. The IdP's form POST is cross-site: the session cookie (SameSite=Lax)
does not come with it, so the ACS answers such a POST with a page that posts the same answer
again from this site (then the cookie comes); nothing is read from the answer before.
"""

from __future__ import annotations

import logging
import time

from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.translation import gettext_noop
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from ..models import IdentityProvider
from . import saml
from .backends import BACKEND
from .sso import SignInRefused, sign_in_complete, sign_in_record
from .sso_views import _refused, _safe_next, _unknown_provider, landing_of

logger = logging.getLogger("gateway")

PENDING = "saml_pending"
PENDING_LIFETIME = 600  # seconds between the login click and the answer
BOUNCED = "gw_bounced"

# Injectable for tests (no test waits for the wall clock).
clock = time.time


def _saml_provider(provider_id: int) -> IdentityProvider | None:
    return (
        IdentityProvider.objects.select_related("institution")
        .filter(pk=provider_id, active=True, protocol=IdentityProvider.Protocol.SAML)
        .first()
    )


def _error_page(request: HttpRequest, provider: IdentityProvider, exc, who: str = ""):
    return _refused(
        request,
        reason=exc.reason,
        message=exc.message,
        status=exc.status,
        provider=provider,
        who=who,
        contacts=getattr(exc, "contacts", None) or None,
    )


@never_cache
@require_GET
def saml_metadata(request: HttpRequest, provider_id: int) -> HttpResponse:
    provider = _saml_provider(provider_id)
    if provider is None:
        return _unknown_provider(request)
    return HttpResponse(saml.sp_metadata(provider), content_type="application/samlmetadata+xml")


@never_cache
@require_GET
def saml_login(request: HttpRequest, provider_id: int) -> HttpResponse:
    provider = _saml_provider(provider_id)
    if provider is None:
        return _unknown_provider(request)
    try:
        request_id, url = saml.login_redirect(provider)
    except saml.SamlError as exc:
        return _error_page(request, provider, exc)
    request.session[PENDING] = {
        "provider": provider.pk,
        "request_id": request_id,
        "next": _safe_next(request, request.GET.get("next")),
        "created": clock(),
    }
    return HttpResponseRedirect(url)


@csrf_exempt  # the IdP's form posts here; the pending request in the session is the check
@never_cache
@require_POST
def saml_acs(request: HttpRequest, provider_id: int) -> HttpResponse:
    provider = _saml_provider(provider_id)
    if provider is None:
        return _unknown_provider(request)
    if PENDING not in request.session and request.POST.get(BOUNCED) != "1":
        return _bounce(request)
    pending = request.session.pop(PENDING, None)  # single use, whatever follows
    problem = _pending_problem(pending, provider.pk)
    if problem is not None:
        return _error_page(request, provider, problem)
    who = ""
    try:
        answer = saml.verified_assertion(
            provider, request.POST.get("SAMLResponse", ""), pending["request_id"]
        )
        claims = saml.claims_of(provider, answer.ava or {})
        who = "".join(c for c in claims["sub"] if c.isprintable())[:254]
        saml.assertion_use_record(provider, answer)
        signed_in = sign_in_complete(provider=provider, claims=claims, request=request)
    except (saml.SamlError, SignInRefused) as exc:
        return _error_page(request, provider, exc, who)
    # login() rotates the session key (a fixed session cannot be planted) and its CSRF token.
    login(request, signed_in.user, backend=BACKEND)
    sign_in_record(provider=provider, signed_in=signed_in, request=request)
    return HttpResponseRedirect(landing_of(pending, staff=bool(signed_in.staff_role)))


def _bounce(request: HttpRequest) -> HttpResponse:
    """The IdP's cross-site POST again, from this site (the session cookie comes along)."""
    fields = {
        name: request.POST.get(name, "")[: saml.MAX_RESPONSE + 1]
        for name in ("SAMLResponse", "RelayState")
        if name in request.POST
    }
    return render(
        request,
        "licensing/sso/saml_continue.html",
        {"action": request.path, "fields": fields, "bounced": BOUNCED},
    )


def _pending_problem(pending, provider_pk: int) -> saml.SamlError | None:
    if not isinstance(pending, dict) or pending.get("provider") != provider_pk:
        return saml.SamlError(
            "no_pending_login",
            gettext_noop(
                "This sign-in was not started here, or was finished already. "
                "Start again from the sign-in page."
            ),
            status=400,
        )
    if not 0 <= clock() - float(pending.get("created", 0)) <= PENDING_LIFETIME:
        return saml.SamlError(
            "login_expired",
            gettext_noop("This sign-in took longer than 10 minutes. Start again."),
            status=400,
        )
    return None

"""The sign-in pages of single sign-on (docs/sso.md). The URL contract (the portal links to
it): `GET /sso/<provider id>/login/?next=<path>` starts the flow, `GET /sso/<provider
id>/callback/` finishes it (one redirect URI per provider: an answer meant for one IdP is
never taken as another's), `GET /sso/find/?email=...` finds the institution by e-mail domain.

The pending login (state, nonce, PKCE verifier, provider, next, when) lives in the session
and is used once: popped at the callback, whatever happens next, so a replayed or stolen
callback URL finds nothing to finish. Every refusal is a page (400/403, styled like the
admin), an audit row `sign_in_refused` and a log line; never a session.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME, login
from django.contrib.auth.views import LoginView
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..models import IdentityProvider
from . import oidc
from .backends import BACKEND
from .sso import (
    PROVIDERS_LISTED_ALONE,
    SignInRefused,
    admin_contacts,
    client_secret_of,
    provider_for_email,
    redirect_uri_of,
    sign_in_complete,
    sign_in_providers,
    sign_in_record,
    sign_in_refusal_record,
)

logger = logging.getLogger("gateway")

PENDING = "sso_pending"
PENDING_LIFETIME = 600  # seconds between the login click and the callback
MAX_PARAM = 4096  # a code or a state longer than this is not one

# Injectable for tests (no test waits for the wall clock).
clock = time.time


def _safe_next(request: HttpRequest, value: str | None) -> str:
    if (
        not value
        or len(value) > 2000
        or not value.startswith("/")
        or not url_has_allowed_host_and_scheme(value, allowed_hosts=None)
    ):
        return ""
    return value


def _refused(
    request: HttpRequest,
    *,
    reason: str,
    message: str,
    status: int,
    provider: IdentityProvider | None = None,
    who: str = "",
    contacts: tuple[str, ...] | list[str] | None = None,
    record: bool = True,
) -> HttpResponse:
    if record:
        sign_in_refusal_record(
            reason=reason, message=message, request=request, provider=provider, who=who
        )
    if contacts is None and provider is not None:
        contacts = admin_contacts(provider.institution_id)
    context = {
        **admin.site.each_context(request),
        "title": _("Sign-in refused"),
        "reason": reason,
        # The English of the audit log, in the page's language here (the catalogue has it).
        "message": gettext(message),
        "institution": provider.institution.name if provider is not None else "",
        "contacts": list(contacts or []),
        "no_group": reason == "no_mapped_group",
    }
    return render(request, "licensing/sso/refused.html", context, status=status)


def _unknown_provider(request: HttpRequest) -> HttpResponse:
    # A number no active provider has: a 404 page, no audit row (nobody to attribute it to).
    return _refused(
        request,
        reason="unknown_provider",
        message="No active identity provider has this number.",
        status=404,
        record=False,
    )


def _provider(provider_id: int) -> IdentityProvider | None:
    return (
        IdentityProvider.objects.select_related("institution")
        .filter(pk=provider_id, active=True)
        .first()
    )


@never_cache
@require_GET
def sso_login(request: HttpRequest, provider_id: int) -> HttpResponse:
    provider = _provider(provider_id)
    if provider is None:
        return _unknown_provider(request)
    if provider.protocol == IdentityProvider.Protocol.SAML:
        # One button per institution, whichever protocol: a SAML provider's flow is its own.
        target = reverse("saml-login", args=[provider.pk])
        next_path = _safe_next(request, request.GET.get("next"))
        return HttpResponseRedirect(
            target + ("?" + urlencode({"next": next_path}) if next_path else "")
        )
    try:
        metadata = oidc.discovery_cache.metadata_for(provider.issuer)
    except oidc.OidcError as exc:
        return _refused(
            request, reason=exc.reason, message=exc.message, status=502, provider=provider
        )
    pending = oidc.new_pending()
    request.session[PENDING] = {
        "provider": provider.pk,
        "state": pending.state,
        "nonce": pending.nonce,
        "verifier": pending.verifier,
        "next": _safe_next(request, request.GET.get("next")),
        "created": clock(),
    }
    url = oidc.authorization_url(
        metadata,
        client_id=provider.client_id,
        redirect_uri=redirect_uri_of(provider.pk),
        pending=pending,
    )
    return HttpResponseRedirect(url)


@never_cache
@require_GET
def sso_callback(request: HttpRequest, provider_id: int) -> HttpResponse:
    pending = request.session.pop(PENDING, None)  # single use, whatever follows
    provider = _provider(provider_id)
    if provider is None:
        return _unknown_provider(request)
    problem = callback_problem(pending, provider.pk, request.GET, now=clock())
    if problem is not None:
        return _refused(request, **problem.as_kwargs(), provider=provider)
    assert isinstance(pending, dict)  # callback_problem refuses anything else
    try:
        claims = _verified_claims(provider, pending, code=request.GET["code"])
    except oidc.OidcError as exc:
        status = 502 if exc.reason in ("idp_unavailable", "discovery_invalid") else 403
        return _refused(
            request, reason=exc.reason, message=exc.message, status=status, provider=provider
        )
    email = claims.get("email")
    who = email if isinstance(email, str) else str(claims["sub"])
    try:
        signed_in = sign_in_complete(provider=provider, claims=claims, request=request)
    except SignInRefused as exc:
        return _refused(
            request,
            reason=exc.reason,
            message=exc.message,
            status=exc.status,
            provider=provider,
            who=who,
            contacts=exc.contacts,
        )
    # login() rotates the session key (a fixed session cannot be planted) and its CSRF token.
    login(request, signed_in.user, backend=BACKEND)
    sign_in_record(provider=provider, signed_in=signed_in, request=request)
    return HttpResponseRedirect(landing_of(pending, staff=bool(signed_in.staff_role)))


@dataclass(frozen=True)
class CallbackProblem:
    """Why the IdP's answer at the callback finishes no sign-in: the refusal page's values."""

    reason: str
    message: str
    status: int = 400

    def as_kwargs(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message, "status": self.status}


def callback_problem(
    pending: Any, provider_pk: int, params: Mapping[str, str], *, now: float
) -> CallbackProblem | None:
    """The first thing wrong with the callback, in the order a stranger's answer is checked:
    the pending login (this provider's, not stale), the state, the IdP's error, the code."""
    return _pending_problem(pending, provider_pk, now=now) or _answer_problem(params, pending)


def _pending_problem(pending: Any, provider_pk: int, *, now: float) -> CallbackProblem | None:
    if not isinstance(pending, dict) or pending.get("provider") != provider_pk:
        return CallbackProblem(
            "no_pending_login",
            gettext_noop(
                "This sign-in was not started here, or was finished already. "
                "Start again from the sign-in page."
            ),
        )
    if not 0 <= now - float(pending.get("created", 0)) <= PENDING_LIFETIME:
        return CallbackProblem(
            "login_expired", gettext_noop("This sign-in took longer than 10 minutes. Start again.")
        )
    return None


def _answer_problem(params: Mapping[str, str], pending: dict) -> CallbackProblem | None:
    state, code = params.get("state", ""), params.get("code", "")
    if not _state_matches(state, pending):
        return CallbackProblem(
            "state_mismatch",
            gettext_noop("The answer of the identity provider does not belong to this sign-in."),
        )
    if "error" in params:
        error = params.get("error", "")[:100]
        return CallbackProblem(
            "idp_error",
            gettext("The identity provider refused the sign-in (%(error)s).")
            % {"error": _printable(error)},
            status=403,
        )
    if not code or len(code) > MAX_PARAM or not _printable(code) == code:
        return CallbackProblem(
            "no_code", gettext_noop("The identity provider's answer holds no authorization code.")
        )
    return None


def _state_matches(state: str, pending: dict) -> bool:
    # Compared in constant time: the state is the login's secret until the callback.
    return (
        bool(state)
        and len(state) <= MAX_PARAM
        and hmac.compare_digest(
            state.encode("utf-8", "surrogatepass"), str(pending["state"]).encode()
        )
    )


def _verified_claims(provider: IdentityProvider, pending: dict, *, code: str) -> dict[str, Any]:
    """The code exchanged, the id_token verified, userinfo asked for what it lacks; or
    OidcError."""
    metadata = oidc.discovery_cache.metadata_for(provider.issuer)
    answer = oidc.token_request(
        metadata,
        code=code,
        redirect_uri=redirect_uri_of(provider.pk),
        verifier=pending["verifier"],
        client_id=provider.client_id,
        client_secret=client_secret_of(provider),
    )
    access_token = answer.get("access_token")
    if not isinstance(access_token, str):
        access_token = None
    claims = oidc.verify_id_token(
        answer["id_token"],
        metadata=metadata,
        client_id=provider.client_id,
        nonce=pending["nonce"],
        access_token=access_token,
        now=clock(),
    )
    return oidc.claims_with_userinfo(
        claims,
        metadata=metadata,
        access_token=access_token,
        wanted=("email", provider.groups_claim),
    )


def landing_of(pending: dict, *, staff: bool) -> str:
    """Where a signed-in person goes: the page they asked for, but never the admin for a
    person without a staff role."""
    target = pending.get("next") or ("/admin/" if staff else "/portal/")
    if not staff and target.startswith("/admin"):
        target = "/portal/"
    return target


def _printable(text: str) -> str:
    return "".join(c for c in text if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF)


@never_cache
@require_GET
def sso_find(request: HttpRequest) -> HttpResponse:
    email = request.GET.get("email", "")
    provider = provider_for_email(email) if _printable(email) == email else None
    if provider is None:
        return _refused(
            request,
            reason="unknown_domain",
            message="No institution on this gateway signs in with this e-mail domain.",
            status=404,
            record=False,
        )
    target = reverse("sso-login", args=[provider.pk])
    next_path = _safe_next(request, request.GET.get("next"))
    if next_path:
        target += "?" + urlencode({"next": next_path})
    return HttpResponseRedirect(target)


class GatewayAuthenticationForm(AdminAuthenticationForm):
    """The admin's password form; a right password of an institution that signs in with its
    identity provider only (--sso-only) is told to use the institution's button (the backend
    says so on the request, after the password was checked: no hint to a guesser)."""

    def get_invalid_login_error(self):
        institution = getattr(self.request, "sso_only_institution", None)
        if institution:
            return ValidationError(
                _(
                    "%(institution)s signs in with its identity provider only: use the "
                    "“Sign in with %(institution)s” button."
                )
                % {"institution": institution},
                code="sso_only",
            )
        return super().get_invalid_login_error()


@never_cache
def admin_login(request: HttpRequest) -> HttpResponseBase:
    """The admin's login page (Django's AdminSite.login, with a button per institution:
    licensing/sso/choices.html, and the --sso-only message)."""
    site = admin.site
    if request.method == "GET" and site.has_permission(request):
        return HttpResponseRedirect(reverse("admin:index", current_app=site.name))
    providers = sign_in_providers()
    context = {
        **site.each_context(request),
        "title": _("Log in"),
        "subtitle": None,
        "app_path": request.get_full_path(),
        "username": request.user.get_username(),
        "sso_providers": providers,
        "sso_find": len(providers) > PROVIDERS_LISTED_ALONE,
    }
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=site.name)
    request.current_app = site.name
    view = LoginView.as_view(
        extra_context=context,
        authentication_form=GatewayAuthenticationForm,
        template_name="licensing/sso/admin_login.html",
    )
    return view(request)

"""The LTI 1.3 pages (docs/lti.md): `GET|POST /lti/login/` (the LMS's third-party login
initiation: a redirect to the platform's authentication request URL) and `POST /lti/launch/`
(the platform's auto-posted form: id_token and state). Both are CSRF-exempt: the LMS posts
them cross-site, and what protects them is the platform's signature, the single-use state and
the nonce (licensing.signin.lti). Every refusal is a page (400/403, styled like the admin),
an audit row `sign_in_refused` and a log line; never a session.
"""

from __future__ import annotations

import logging

from django.contrib import admin
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from ..models import LtiPlatform
from . import lti
from .backends import BACKEND
from .sso import admin_contacts

logger = logging.getLogger("gateway")


def _refused(
    request: HttpRequest, error: lti.LtiError, platform: LtiPlatform | None = None, who: str = ""
) -> HttpResponse:
    lti.launch_refusal_record(error=error, request=request, platform=platform, who=who)
    context = {
        **admin.site.each_context(request),
        "title": _("Launch refused"),
        "reason": error.reason,
        # The English of the audit log, in the page's language here (the catalogue has it).
        "message": gettext(error.message),
        "institution": platform.institution.name if platform is not None else "",
        "contacts": admin_contacts(platform.institution_id) if platform is not None else [],
        "lti": True,
    }
    return render(request, "licensing/sso/refused.html", context, status=error.status)


@csrf_exempt
@never_cache
@require_http_methods(["GET", "POST"])
def lti_login(request: HttpRequest) -> HttpResponse:
    params = request.POST if request.method == "POST" else request.GET
    try:
        _, url = lti.login_redirect_url({name: params.get(name) for name in params})
    except lti.LtiError as exc:
        return _refused(request, exc)
    return HttpResponseRedirect(url)


@csrf_exempt
@never_cache
@require_POST
def lti_launch(request: HttpRequest) -> HttpResponse:
    platform, who = None, ""
    try:
        state = lti.launch_state_take(request.POST.get("state"))
        platform = state.platform
        if not platform.active:
            raise lti.LtiError(
                "unknown_platform", gettext_noop("This LMS is not registered on the gateway.")
            )
        claims = lti.verify_launch_token(request.POST.get("id_token"), launch=state)
        sub = claims.get("sub")
        # Who, for the audit row of a refusal after the signature held (printable only).
        who = "".join(c for c in sub if c.isprintable())[:254] if isinstance(sub, str) else ""
        launch = lti.launch_of(claims, platform.access_rules)
        launched = lti.launch_complete(platform=platform, launch=launch, request=request)
    except lti.LtiError as exc:
        return _refused(request, exc, platform, who)
    # login() rotates the session key (a fixed session cannot be planted) and its CSRF token.
    login(request, launched.user, backend=BACKEND)
    lti.launch_record(platform=platform, launched=launched, request=request)
    # Learners and instructors alike land on the portal page of the course (its view follows
    # their role there: a member's allowance and keys, a teacher's settings and usage).
    return HttpResponseRedirect(reverse("portal:course", args=[launched.course.pk]))

"""The language of a page (docs/languages.md): on the admin stack only, never on /v1.

In this order: the person's own choice (stored on their profile, else the language cookie
the menu sets), their browser's Accept-Language if it names a language the gateway speaks,
their institution's default, settings.LANGUAGE_CODE. The management API (/manage/v1/) is an
API: it answers in LANGUAGE_CODE whatever the caller's choice, as /v1 does.
"""

from typing import Any, cast

from django.conf import settings
from django.http import HttpResponseBadRequest, HttpResponseRedirect
from django.middleware.locale import LocaleMiddleware
from django.utils import translation
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.languages import supported_language
from licensing.access.languages import do_set_person_language, page_language

API_PREFIXES = ("/manage/",)


def choose_language(request) -> str:
    if request.path.startswith(API_PREFIXES):
        return settings.LANGUAGE_CODE
    return page_language(
        getattr(request, "user", None),
        request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME),
        request.META.get("HTTP_ACCEPT_LANGUAGE", ""),
    )


class LanguageMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware (its answer's Vary and Content-Language headers) with the
    gateway's order of sources."""

    def process_request(self, request):
        translation.activate(choose_language(request))
        request.LANGUAGE_CODE = translation.get_language()


@require_POST
def set_language(request):
    """The language menu's form: `language` (one of LANGUAGES) and `next` (a page of this
    site). Sets the cookie and, for a signed-in person with a profile, stores the choice on it;
    an unknown language is a 400, an unsafe `next` goes to the site's root."""
    language = supported_language(request.POST.get("language"))
    if language is None:
        return HttpResponseBadRequest("Unknown language.", content_type="text/plain")
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    response = HttpResponseRedirect(target if safe and target else "/")
    if request.user.is_authenticated:
        do_set_person_language(request.user, language)
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        language,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        path=settings.LANGUAGE_COOKIE_PATH,
        domain=settings.LANGUAGE_COOKIE_DOMAIN,
        secure=settings.LANGUAGE_COOKIE_SECURE or settings.SESSION_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        samesite=cast(Any, settings.LANGUAGE_COOKIE_SAMESITE),  # "Lax" (settings)
    )
    return response

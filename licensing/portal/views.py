"""The student portal's pages. Views parse the request and call the selectors and services;
every page but the login page needs a signed-in student (`student_required`)."""

from __future__ import annotations

from functools import wraps
from urllib.parse import urlencode

from django import forms
from django.contrib import auth
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core import clock
from core.languages import grouped
from core.zones import zone_or_utc

from ..access.reach import destinations_of
from ..access.scoping import scope_of
from ..console import charts
from ..console.review import csv_response, download
from ..courses.services import course_update
from ..courses.usage import course_usage
from ..models import EndUser
from ..safeguarding.selectors import notice_for
from ..signin.sso import PROVIDERS_LISTED_ALONE, sign_in_providers
from . import courses, personal_data, selectors, services

SESSION_NEW_KEY = "portal_new_key"  # the key just made, shown once on the next GET of the list


def _login_url(request) -> str:
    return reverse("portal:login") + "?" + urlencode({"next": request.path})


def student_required(view):
    """Not signed in: the login page. Signed in without student access (no active end user
    on an active license): the 403 page saying whom to ask."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return HttpResponseRedirect(_login_url(request))
        end_user = selectors.portal_end_user(request.user)
        if end_user is None:
            contact = selectors.no_access_contact(request.user)
            return render(
                request,
                "portal/no_access.html",
                {"title": _("No student access"), "contact": contact},
                status=403,
            )
        # The pages' times in the institution's time zone, as its days and budgets are.
        with timezone.override(zone_or_utc(end_user.license.institution.timezone)):
            return view(request, end_user, *args, **kwargs)

    return never_cache(wrapper)


def _page(request, end_user: EndUser, template: str, context: dict, status: int = 200):
    base = {
        "end_user": end_user,
        "license": end_user.license,
        "institution": end_user.license.institution,
        "terms_pending": selectors.terms_pending(end_user),
    }
    return render(request, template, {**base, **context}, status=status)


# --- signing in and out ---------------------------------------------------------------------


@require_GET
@never_cache
def login(request):
    if request.user.is_authenticated and selectors.portal_end_user(request.user) is not None:
        return HttpResponseRedirect(reverse("portal:dashboard"))
    providers = sign_in_providers(students_only=True)
    return render(
        request,
        "portal/login.html",
        {
            "title": _("Sign in"),
            "providers": providers,
            "find_by_email": len(providers) > PROVIDERS_LISTED_ALONE,
            "next": _next_of(request),
        },
    )


def _next_of(request) -> str:
    """Where to come back after signing in: a portal page of this site, else the overview
    (never another host: `next` is typed by whoever sent the link)."""
    wanted = request.GET.get("next", "")
    home = reverse("portal:dashboard")
    if (
        wanted.startswith(home)
        and "\\" not in wanted
        and url_has_allowed_host_and_scheme(wanted, allowed_hosts=None)
        and wanted.isprintable()
    ):
        return wanted
    return home


@require_POST
def logout(request):
    end_user = selectors.portal_end_user(request.user)
    if request.user.is_authenticated:
        services.sign_out_record(
            request=request,
            institution_id=end_user.license.institution_id if end_user is not None else None,
        )
    auth.logout(request)
    return HttpResponseRedirect(reverse("portal:login"))


# --- pages ----------------------------------------------------------------------------------


@require_GET
@student_required
def dashboard(request, end_user: EndUser):
    wallet = selectors.wallet_view(end_user)
    usage = selectors.usage_of(end_user)
    bands = [charts.Band("Credits", [row.credits for row in usage.by_day], charts.PALETTE[0])]
    # Safe: licensing.console.charts escapes every label it writes.
    chart = mark_safe(
        charts.stacked_bars(
            usage.days, bands, title=gettext("Micro-credits by day"), unit="micro-credits"
        )
    )
    return _page(
        request,
        end_user,
        "portal/dashboard.html",
        {
            "title": end_user.license.name,
            "wallet": wallet,
            "usage": usage,
            "usage_chart": chart,
            "used_days": [row for row in usage.by_day if row.requests],
            "models": selectors.usable_models(end_user),
            "courses": courses.courses_of(end_user),
        },
    )


@require_GET
@student_required
def data_flow(request, end_user: EndUser):
    return _page(request, end_user, "portal/data.html", _data_context(end_user))


def _data_context(end_user: EndUser) -> dict:
    models = selectors.usable_models(end_user)
    return {
        "title": _("Where your requests go"),
        "models": models,
        "destinations": destinations_of(models),
        "export_parts": personal_data.PARTS,
        "safeguarding": notice_for(end_user.license.institution_id),
    }


@require_GET
@student_required
def data_export(request, end_user: EndUser):
    """Everything held about the student: `?format=json` (one document) or `?format=csv&part=`
    one of personal_data.PARTS. Anything else is a 400 page."""
    kind, part = request.GET.get("format", "json"), request.GET.get("part", "")
    now = clock.utcnow()
    if kind == "json" and not part:
        chunks = personal_data.json_chunks(end_user, now)
        response = download(
            request, chunks, "application/json", personal_data.filename("all", "json", now)
        )
    elif kind == "csv" and part == "transactions":
        name = personal_data.filename(part, "csv", now)
        response = csv_response(request, personal_data.transactions(end_user), filename=name)
    elif kind == "csv" and part in personal_data.PARTS:
        chunks = personal_data.csv_rows(part, end_user)
        response = download(
            request, chunks, "text/csv; charset=utf-8", personal_data.filename(part, "csv", now)
        )
    else:
        return _page(request, end_user, "portal/data.html", _data_context(end_user), status=400)
    services.personal_data_exported(
        end_user=end_user, what=f"{kind}:{part or 'all'}", request=request
    )
    return response


@require_http_methods(["GET", "POST"])
@student_required
def terms(request, end_user: EndUser):
    institution = end_user.license.institution
    if request.method == "POST":
        if not institution.terms_of_use.strip():
            return HttpResponseRedirect(reverse("portal:keys"))
        if request.POST.get("accept") != "yes":
            return _page(
                request,
                end_user,
                "portal/terms.html",
                {"title": _("Terms of use"), "error": _("Tick the box to accept the terms.")},
                status=400,
            )
        services.terms_accept(end_user=end_user, request=request)
        return HttpResponseRedirect(reverse("portal:keys"))
    return _page(request, end_user, "portal/terms.html", {"title": _("Terms of use")})


def _key_name_valid(value: str) -> None:
    services.key_name_clean(value)  # raises ValidationError


class KeyForm(forms.Form):
    name = forms.CharField(
        required=False,
        max_length=services.MAX_KEY_NAME,
        strip=True,
        validators=[_key_name_valid],
        widget=forms.TextInput(attrs={"placeholder": _("e.g. laptop, thesis project")}),
    )


@require_http_methods(["GET", "POST"])
@student_required
def keys(request, end_user: EndUser):
    form = KeyForm()
    error = ""
    status = 200
    if request.method == "POST":
        form = KeyForm(request.POST)
        if form.is_valid():
            try:
                row, key = services.portal_key_create(
                    end_user=end_user, name=form.cleaned_data["name"], request=request
                )
            except services.PortalRefused as exc:
                error, status = exc.message, exc.status
            else:
                # Kept server-side in the session (not a cookie) for the one GET that shows it.
                request.session[SESSION_NEW_KEY] = {"id": row.pk, "key": key}
                return HttpResponseRedirect(reverse("portal:keys"))
        else:
            status = 400
    new_key = request.session.pop(SESSION_NEW_KEY, None) if request.method == "GET" else None
    rows = selectors.keys_of(end_user)
    active = sum(1 for row in rows if row.active)
    return _page(
        request,
        end_user,
        "portal/keys.html",
        {
            "title": _("Your API keys"),
            "form": form,
            "error": error,
            "keys": rows,
            "active_count": active,
            "limit": end_user.license.institution.portal_key_limit,
            "new_key": new_key,
            "first_model": _example_model(end_user) if new_key else "",
            "base_url": request.build_absolute_uri("/v1"),
        },
        status=status,
    )


def _example_model(end_user: EndUser) -> str:
    """A chat model the student may use, for the example under a new key."""
    for model in selectors.usable_models(end_user):
        if "chat_completions" in model.services:
            return model.model_id
    return ""


@require_POST
@student_required
def key_revoke(request, end_user: EndUser, key_id: str):
    parsed = selectors.parse_id(key_id)
    if (
        parsed is None
        or services.portal_key_revoke(end_user=end_user, key_id=parsed, request=request) is None
    ):
        raise Http404("No such key")
    return HttpResponseRedirect(reverse("portal:keys"))


# --- the course page --------------------------------------------------------------------------

SESSION_NEW_COURSE_KEY = "portal_new_course_key"


def signed_in_required(view):
    """The course page's gate: signed in (else the login page). Whether they may see the course
    is the view's question (courses.course_access): teachers are staff users without an end
    user, whom `student_required` would turn away."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return HttpResponseRedirect(_login_url(request))
        return view(request, *args, **kwargs)

    return never_cache(wrapper)


def _course_access(request, course_id: str) -> courses.CourseAccess:
    parsed = selectors.parse_id(course_id)
    access = courses.course_access(request.user, parsed) if parsed is not None else None
    if access is None:
        raise Http404("No such course")
    return access


@require_http_methods(["GET", "POST"])
@signed_in_required
def course(request, course_id: str):
    access = _course_access(request, course_id)
    if access.role == courses.INSTRUCTOR:
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        return _instructor_page(request, access)
    return _learner_page(request, access)


def _course_context(request, access: courses.CourseAccess) -> dict:
    course = access.course
    return {
        "title": f"{course.code} · {course.name}",
        "course": course,
        "institution": course.institution,
        "zone": courses.zone_of(course),
    }


def _learner_page(request, access: courses.CourseAccess):
    course, end_user = access.course, access.end_user
    assert end_user is not None
    form = KeyForm()
    error = ""
    status = 200
    if request.method == "POST":
        form = KeyForm(request.POST)
        if form.is_valid():
            try:
                row, key = services.portal_key_create(
                    end_user=end_user,
                    name=form.cleaned_data["name"],
                    course=course,
                    request=request,
                )
            except services.PortalRefused as exc:
                error, status = exc.message, exc.status
            else:
                request.session[SESSION_NEW_COURSE_KEY] = {
                    "id": row.pk,
                    "key": key,
                    "course": course.pk,
                }
                return HttpResponseRedirect(reverse("portal:course", args=[course.pk]))
        else:
            status = 400
    new_key = None
    if request.method == "GET":
        shown = request.session.get(SESSION_NEW_COURSE_KEY)
        if shown is not None and shown.get("course") == course.pk:
            new_key = request.session.pop(SESSION_NEW_COURSE_KEY)
    usage = selectors.usage_of(end_user, course=course)
    models = selectors.usable_models(end_user, course=course)
    keys = selectors.keys_of(end_user, course=course)
    context = {
        **_course_context(request, access),
        "end_user": end_user,
        "license": end_user.license,
        "terms_pending": selectors.terms_pending(end_user),
        "role": courses.LEARNER,
        "state": courses.course_state(course, end_user=end_user),
        "levels": courses.course_levels_of(course, end_user),
        "usage": usage,
        "used_days": [row for row in usage.by_day if row.requests],
        "models": models,
        "keys": keys,
        "form": form,
        "error": error,
        "active_count": selectors.active_key_count(end_user),
        "limit": end_user.license.institution.portal_key_limit,
        "new_key": new_key,
        "first_model": next((m.model_id for m in models if "chat_completions" in m.services), ""),
        "base_url": request.build_absolute_uri("/v1"),
    }
    return render(request, "portal/course.html", context, status=status)


def _instructor_page(request, access: courses.CourseAccess, error: str = "", status: int = 200):
    course = access.course
    usage = course_usage(course)
    rate = selectors.institution_rate(course.institution)
    context = {
        **_course_context(request, access),
        "role": courses.INSTRUCTOR,
        "state": courses.course_state(course),
        "settings": courses.course_settings(course),
        "allowance_text": courses.CourseSettings.credits(rate, course.allowance),
        "pool_text": courses.CourseSettings.credits(rate, course.pool_limit),
        "usage": usage,
        "usage_rows": [
            {
                "row": row,
                "money": rate.format(row.credits),
                "credits": grouped(row.credits),
                "period": grouped(row.period_used)
                + (
                    ""
                    if row.allowance is None
                    else " " + _("of %(allowance)s") % {"allowance": grouped(row.allowance)}
                ),
            }
            for row in usage.rows
        ],
        "total_money": rate.format(usage.credits),
        "total_credits": grouped(usage.credits),
        "admin_url": reverse("admin:licensing_course_change", args=[course.pk]),
        "error": error,
    }
    return render(request, "portal/course.html", context, status=status)


@require_POST
@signed_in_required
def course_exam(request, course_id: str):
    """The instructor's exam-mode switch: through course_update with the teacher's scope (the
    audit row `exam_mode_changed`; the save clears every worker's course caches)."""
    access = _course_access(request, course_id)
    if access.role != courses.INSTRUCTOR:
        raise Http404("No such course")
    wanted = request.POST.get("exam_mode")
    if wanted not in ("on", "off"):
        return _instructor_page(request, access, gettext("Choose exam mode on or off."), status=400)
    try:
        course_update(
            course=access.course,
            changes={"exam_mode": wanted == "on"},
            scope=scope_of(request.user),
            request=request,
        )
    except ValidationError as exc:
        return _instructor_page(request, access, "; ".join(exc.messages), status=400)
    return HttpResponseRedirect(reverse("portal:course", args=[access.course.pk]))


@require_POST
@signed_in_required
def course_key_revoke(request, course_id: str, key_id: str):
    access = _course_access(request, course_id)
    parsed = selectors.parse_id(key_id)
    if (
        access.role != courses.LEARNER
        or access.end_user is None
        or parsed is None
        or services.portal_key_revoke(
            end_user=access.end_user, key_id=parsed, course=access.course, request=request
        )
        is None
    ):
        raise Http404("No such key")
    return HttpResponseRedirect(reverse("portal:course", args=[access.course.pk]))

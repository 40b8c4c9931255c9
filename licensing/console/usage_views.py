"""The usage page (/admin/licensing/transaction/usage/): credits and requests per day by service,
by model and by status class, and the top licenses, API keys and end users by spend, over a
range of days (of the institution's time zone; UTC for a superuser), as server-side SVG charts
(licensing.console.charts). Whoever may view transactions may open it, scoped like the ledger:
an institution's staff see their institution, superusers every institution or the one they pick.
Bad parameters are a message on the page (400)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast
from urllib.parse import urlencode

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import QueryDict
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise  # str or a lazy translation

from core.languages import grouped

from ..access.scoping import scope_of, scoped
from ..models import Institution, License, Outcome, Transaction
from . import charts
from .money import ledger_money
from .usage_report import (
    PRESETS,
    RangeError,
    UsageReport,
    in_range,
    preset_range,
    resolve_range,
    usage_report,
)

TEMPLATE = "admin/licensing/transaction/usage.html"
DATE_FORMAT = "%Y-%m-%d"
UNIT = _("micro-credits")
SHORT_OUTCOMES: dict[str, StrOrPromise] = {
    Outcome.SUCCESS: _("Succeeded"),
    Outcome.CLIENT_ERROR: _("Client errors"),
    Outcome.DENIED: _("Denied"),
    Outcome.FAILURE: _("Failures"),
}


def admin_urls(model_admin) -> list:
    """The usage page, under the transactions admin (named admin:licensing_transaction_usage)."""
    view = model_admin.admin_site.admin_view(partial(usage_view, model_admin=model_admin))
    return [path("usage/", view, name="licensing_transaction_usage")]


class UsageForm(forms.Form):
    """The page's query parameters; choices are scoped, so another institution is invalid."""

    institution = forms.ModelChoiceField(
        queryset=Institution.objects.none(),
        required=False,
        empty_label=_("All institutions"),
        error_messages={"invalid_choice": _("Unknown institution, or not one you may see.")},
    )
    license = forms.ModelChoiceField(
        queryset=License.objects.none(),
        required=False,
        widget=forms.HiddenInput,
        error_messages={"invalid_choice": _("Unknown license, or not one you may see.")},
    )
    since = forms.DateField(
        required=False,
        label=_("From"),
        input_formats=[DATE_FORMAT],
        widget=forms.DateInput(attrs={"type": "date"}, format=DATE_FORMAT),
        error_messages={"invalid": _("Enter a date as YYYY-MM-DD.")},
    )
    until = forms.DateField(
        required=False,
        label=_("Until (not included)"),
        input_formats=[DATE_FORMAT],
        widget=forms.DateInput(attrs={"type": "date"}, format=DATE_FORMAT),
        error_messages={"invalid": _("Enter a date as YYYY-MM-DD.")},
    )

    def __init__(self, data, scope):
        super().__init__(data)
        fields = cast(dict[str, forms.ModelChoiceField], self.fields)
        fields["institution"].queryset = scoped(Institution.objects.all(), scope)
        fields["license"].queryset = scoped(License.objects.all(), scope)

    def clean(self):
        super().clean()
        data = self.cleaned_data  # what Form.clean returns (typed Optional in the stubs)
        if self.errors:
            return data
        try:
            data["since"], data["until"] = resolve_range(data.get("since"), data.get("until"))
        except RangeError as exc:
            self.add_error(exc.field, exc.message)
        lic, institution = data.get("license"), data.get("institution")
        if lic is not None and institution is not None and lic.institution_id != institution.pk:
            self.add_error("license", _("This license belongs to another institution."))
        return data


def usage_view(request, model_admin):
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    scope = scope_of(request.user)
    form = UsageForm(request.GET, scope)
    valid = form.is_valid()
    data = form.cleaned_data
    keep = {name: getattr(data.get(name), "pk", None) for name in ("institution", "license")}
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": Transaction._meta,
        "title": _("Usage"),
        "form": form,
        "superuser": scope.superuser,
    }
    if not valid:
        context.update(errors=_errors(form), presets=_presets(keep))
        return TemplateResponse(request, TEMPLATE, context, status=400)
    report = usage_report(
        scoped(Transaction.objects.all(), scope),
        data["since"],
        data["until"],
        institution_id=keep["institution"],
        license_id=keep["license"],
    )
    context.update(_report_context(report, form, keep, scope))
    rows = in_range(
        scoped(Transaction.objects.all(), scope),
        data["since"],
        data["until"],
        institution_id=keep["institution"],
        license_id=keep["license"],
    )
    money = ledger_money(rows)
    # Beside the credits: their worth at each institution's rate (licensing.console.money).
    context["totals"].insert(
        1, {"key": "money", "label": _("Cost"), "value": money, "title": _("The credits as money")}
    )
    return TemplateResponse(request, TEMPLATE, context)


def _report_context(report: UsageReport, form: UsageForm, keep: dict, scope) -> dict:
    span = {"since": report.since, "until": report.until}
    # The inputs show the range reported, defaults included.
    form.data = {**cast(QueryDict, form.data).dict(), **{k: v.isoformat() for k, v in span.items()}}
    data = form.cleaned_data
    return {
        "report": report,
        "subtitle": _subtitle(report, data["institution"], data["license"], scope),
        "license": data["license"],
        "all_licenses_url": _query({**keep, "license": None, **span}),
        "transactions_query": _query({**keep, **span}),
        "presets": _presets(keep, report),
        "totals": _totals(report),
        "charts": [*_charts(report), *_tops(report)],
    }


def _errors(form) -> list[str]:
    messages = []
    for name, errors in form.errors.items():
        field = form.fields.get(name)
        label = (field.label or name.capitalize()) if field is not None else ""
        messages += [f"{label}: {error}" if label else error for error in errors]
    return messages


def _query(params: dict) -> str:
    kept = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in params.items()}
    return "?" + urlencode({k: v for k, v in kept.items() if v is not None})


def _subtitle(report: UsageReport, institution, lic, scope) -> str:
    if lic is not None:
        who = gettext("License %(name)s") % {"name": lic.name}
    elif institution is not None:
        who = institution.name
    elif scope.superuser:
        who = gettext("All institutions")
    else:
        who = Institution.objects.get(pk=scope.institution_id).name
    days = len(report.days)
    span = gettext("%(since)s to %(until)s") % {
        "since": f"{report.since:%Y-%m-%d}",
        "until": f"{report.last_day:%Y-%m-%d}",
    }
    zone = timezone.get_current_timezone_name()
    length = ngettext("%(days)s day, %(zone)s", "%(days)s days, %(zone)s", days) % {
        "days": days,
        "zone": zone,
    }
    return f"{who} · {span} ({length})"


def _presets(keep: dict, report: UsageReport | None = None) -> list[dict]:
    presets = []
    for days in PRESETS:
        since, until = preset_range(days)
        current = report is not None and (since, until) == (report.since, report.until)
        presets.append(
            {
                "label": gettext("Last %(days)s days") % {"days": days},
                "url": _query(keep | {"since": since, "until": until}),
                "current": current,
            }
        )
    return presets


def _totals(report: UsageReport) -> list[dict]:
    totals = [
        ("credits", gettext("Credits (%(unit)s)") % {"unit": UNIT}, report.total.total_credits),
        ("requests", gettext("Requests"), report.total.total_requests),
        *(
            (s.name, SHORT_OUTCOMES.get(s.name, s.name), s.total_requests)
            for s in report.by_outcome
        ),
    ]
    described = dict(Outcome.choices)
    return [
        {"key": key, "label": label, "value": grouped(value), "title": described.get(key, label)}
        for key, label, value in totals
    ]


def _bands(series, values: str, outcomes: bool = False) -> list[charts.Band]:
    """Chart bands of report series: status classes by their description and fixed colours,
    other series in palette order (the same model has the same colour in both model charts)."""
    labels = dict(Outcome.choices) if outcomes else {}
    colours = charts.palette([s.name for s in series], charts.OUTCOME_COLOURS if outcomes else {})
    return [
        charts.Band(
            label=gettext(s.name) if s.other else labels.get(s.name, s.name),
            values=getattr(s, values),
            colour=charts.OTHER_COLOUR if s.other else colour,
        )
        for s, colour in zip(series, colours, strict=True)
    ]


def _charts(report: UsageReport) -> list[dict]:
    specs = [
        ("credits-by-service", gettext("Credits per day by service"), report.by_service, "credits"),
        (
            "requests-by-service",
            gettext("Requests per day by service"),
            report.by_service,
            "requests",
        ),
        ("credits-by-model", gettext("Credits per day by model"), report.by_model, "credits"),
        ("requests-by-model", gettext("Requests per day by model"), report.by_model, "requests"),
        (
            "requests-by-outcome",
            gettext("Requests per day by status class"),
            report.by_outcome,
            "requests",
        ),
    ]
    result = []
    for key, title, series, values in specs:
        bands = _bands(series, values, outcomes=series is report.by_outcome)
        unit = str(UNIT) if values == "credits" else gettext("requests")
        svg = charts.stacked_bars(report.days, bands, title=title, unit=unit)
        # Safe: licensing.console.charts escapes every label it writes.
        result.append({"id": key, "title": title, "unit": unit, "svg": mark_safe(svg)})
    return result


def _tops(report: UsageReport) -> list[dict]:
    changelist = reverse("admin:licensing_transaction_changelist")
    span = {"since": report.since, "until": report.until}
    specs = [
        ("top-licenses", gettext("Top licenses by credits"), report.top_licenses, "license"),
        ("top-api-keys", gettext("Top API keys by credits"), report.top_api_keys, "api_key"),
        ("top-end-users", gettext("Top end users by credits"), report.top_end_users, "end_user"),
    ]
    result = []
    for key, title, rows, param in specs:
        bars = [
            charts.HBar(
                label=row.label,
                value=row.credits,
                href=changelist + _query({param: row.id, **span}),
                note=gettext("%(n)s requests") % {"n": grouped(row.requests)},
            )
            for row in rows
        ]
        svg = charts.hbars(bars, title=title, unit=str(UNIT))
        result.append(
            {"id": key, "title": title, "unit": str(UNIT), "svg": mark_safe(svg)}
        )  # escaped
    return result

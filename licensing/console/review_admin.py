"""The transactions admin's review page (licensing.console.admin.transactions.TransactionAdmin
uses these): the filter bar built from licensing.console.review's FilterSet (autocompletes for
licenses, keys, end users and institutions, fed by a scoped JSON endpoint of its own), the totals
above the table, and the change list that applies both."""

from __future__ import annotations

from calendar import monthrange
from datetime import date
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import HttpResponseBadRequest, JsonResponse
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.translation import gettext_lazy as _

from core.languages import grouped

from ..access.scoping import scope_of, scoped
from ..models import ApiKey, EndUser, Institution, License, Transaction
from .money import ledger_money
from .people import end_user_people, end_user_person, people_json
from .review import InstantField, TransactionFilter, transaction_totals

CHOICES_PER_PAGE = 20
TERM_MAX_CHARS = 100


def choice_label(obj) -> str:
    """How an institution, license, API key or end user is named in the filter bar."""
    if isinstance(obj, ApiKey):
        name = f" {obj.name}" if obj.name else ""
        return f"{obj.prefix}…{name} ({obj.license.name})"
    if isinstance(obj, EndUser):
        return f"{end_user_person(obj).label()} ({obj.license.name})"
    return obj.name


# filter name: (model, fields searched by the autocomplete term, select_related, ordering)
# field: (model, searched fields, select_related, ordering)
CHOICE_SOURCES: dict[str, tuple[Any, tuple[str, ...], tuple[str, ...], str]] = {
    "institution": (Institution, ("name",), (), "name"),
    "license": (License, ("name",), (), "name"),
    "api_key": (ApiKey, ("prefix", "name", "license__name"), ("license",), "prefix"),
    "end_user": (EndUser, ("subject", "license__name"), ("license",), "subject"),
}
# The model field each autocomplete stands for (the admin widget reads its metadata).
WIDGET_FIELDS = {
    "institution": License._meta.get_field("institution"),
    "license": Transaction._meta.get_field("license"),
    "api_key": Transaction._meta.get_field("api_key"),
    "end_user": Transaction._meta.get_field("end_user"),
}


def choices_json(request, field: str):
    """select2's answer for one filter's autocomplete: the rows of the caller's scope whose
    searched fields contain `term`, 20 per page."""
    if field not in CHOICE_SOURCES:
        return JsonResponse({"error": "Unknown filter"}, status=404)
    term = request.GET.get("term", "")
    try:
        page = int(request.GET.get("page") or 1)
    except ValueError:
        page = 0
    if "\x00" in term or len(term) > TERM_MAX_CHARS or not 1 <= page <= 1000:
        return JsonResponse({"error": "Bad term or page"}, status=400)
    model, searched, related, ordering = CHOICE_SOURCES[field]
    if model is EndUser:  # people by name and e-mail (licensing.console.people)
        return people_json(
            request,
            scoped(EndUser.objects.select_related("license"), scope_of(request.user)),
            "end_user",
            ("user__last_name", "user__first_name", "subject"),
            with_license=True,
        )
    rows = scoped(model.objects.select_related(*related), scope_of(request.user))
    if term.strip():
        condition = Q()
        for name in searched:
            condition |= Q(**{f"{name}__icontains": term.strip()})
        rows = rows.filter(condition)
    start = (page - 1) * CHOICES_PER_PAGE
    found = list(rows.order_by(ordering, "pk")[start : start + CHOICES_PER_PAGE + 1])
    results = [{"id": str(obj.pk), "text": choice_label(obj)} for obj in found]
    return JsonResponse(
        {
            "results": results[:CHOICES_PER_PAGE],
            "pagination": {"more": len(found) > CHOICES_PER_PAGE},
        }
    )


class ScopedAutocomplete(AutocompleteSelect):
    """The admin's select2 widget, asking the transactions admin's own endpoint: the admin's
    autocomplete view would check the related model's view permission (reviewers have none
    for keys and end users)."""

    def __init__(self, filter_name: str, attrs=None):
        super().__init__(WIDGET_FIELDS[filter_name], admin.site, attrs)
        self.filter_name = filter_name

    def get_url(self):
        return reverse("admin:licensing_transaction_choices", args=[self.filter_name])

    def optgroups(self, name, value, attr=None):
        # The chosen row is looked up by id to show its name: only what can be an id.
        ids = [v for v in value if str(v).isascii() and str(v).isdigit() and len(str(v)) < 19]
        return super().optgroups(name, ids, attr)


class UtcDateTimeInput(forms.DateTimeInput):
    """`<input type="datetime-local">`, showing any accepted value as wall time of the current
    time zone (the institution's for its staff, licensing.console.local_time; else UTC)."""

    input_type = "datetime-local"

    def format_value(self, value):
        try:
            instant = InstantField().clean(value)
        except ValidationError:
            return None
        if instant is None:
            return None
        try:
            instant = timezone.localtime(instant)
        except OverflowError:  # the first or last day datetime can hold, in a far zone
            return None
        return instant.strftime("%Y-%m-%dT%H:%M:%S" if instant.second else "%Y-%m-%dT%H:%M")


def admin_widget_media():
    return ScopedAutocomplete("license").media


def admin_filterset(request, queryset) -> TransactionFilter:
    """The FilterSet with the filter bar's widgets."""
    filterset = TransactionFilter(request.GET, queryset=queryset, request=request)
    fields = filterset.form.fields
    for name in CHOICE_SOURCES:
        field = fields[name]
        field.label_from_instance = choice_label
        field.widget = ScopedAutocomplete(name, attrs={"data-placeholder": _("any")})
        field.widget.choices = field.choices
    for name in ("since", "until"):
        fields[name].widget = UtcDateTimeInput()
    fields["status"].widget = forms.NumberInput(
        attrs={"min": 100, "max": 599, "placeholder": _("any")}
    )
    fields["failed_over"].widget = forms.Select(
        choices=[("", _("any")), ("true", _("yes")), ("false", _("no"))]
    )
    fields["model"].widget.attrs["placeholder"] = _("requested or billed")
    fields["q"].widget.attrs.update(
        placeholder=_("request id, answer id, key=value, value"), spellcheck="false"
    )
    return filterset


def _day_title(day: date) -> str:
    return formats.date_format(day, "MONTH_DAY_FORMAT")


def _month_title(day: date) -> str:
    return formats.date_format(day, "YEAR_MONTH_FORMAT")


class DateDrillDown:
    """The admin's date drill-down, with its links made from the first and last time of the
    filtered rows (known from the totals query) rather than from a DISTINCT over every row
    (400 ms on a million): every year, month or day between the two is offered."""

    def __init__(self, cl):
        self.cl, field = cl, cl.date_hierarchy
        self.prefix = f"{field}__"
        self.keys = (f"{field}__year", f"{field}__month", f"{field}__day")
        self.first: date | None = None
        self.last: date | None = None  # both or neither
        if cl.totals.first is not None:
            # The hierarchy's lookups (created_at__day, ...) are in the current time zone.
            self.first = timezone.localtime(cl.totals.first).date()
            self.last = timezone.localtime(cl.totals.last).date()

    def context(self) -> dict:
        year, month, day = (
            int(self.cl.params[k]) if k in self.cl.params else None for k in self.keys
        )
        first, last = self.first, self.last
        if year is None and first is not None and last is not None and first.year == last.year:
            year, month = first.year, (first.month if first.month == last.month else None)
        if year and month and day:
            back, choices = self._day(date(year, month, day))
        elif year and month:
            back, choices = self._days(year, month)
        elif year:
            back, choices = self._months(year)
        else:
            back, choices = self._years()
        return {"show": True, "back": back, "choices": choices}

    def _link(self, *values) -> str:
        return self.cl.get_query_string(dict(zip(self.keys, values, strict=False)), [self.prefix])

    def _within(self, start: date, end: date) -> bool:
        first, last = self.first, self.last
        return first is not None and last is not None and start <= last and end >= first

    def _day(self, chosen: date):
        back = {"link": self._link(chosen.year, chosen.month), "title": _month_title(chosen)}
        return back, [{"title": _day_title(chosen)}]

    def _days(self, year: int, month: int):
        days = [date(year, month, d) for d in range(1, monthrange(year, month)[1] + 1)]
        choices = [
            {"link": self._link(year, month, d.day), "title": _day_title(d)}
            for d in days
            if self._within(d, d)
        ]
        return {"link": self._link(year), "title": str(year)}, choices

    def _months(self, year: int):
        choices = [
            {"link": self._link(year, m), "title": _month_title(date(year, m, 1))}
            for m in range(1, 13)
            if self._within(date(year, m, 1), date(year, m, monthrange(year, m)[1]))
        ]
        return {"link": self._link(), "title": _("All dates")}, choices

    def _years(self):
        first, last = self.first, self.last
        years = range(first.year, last.year + 1) if first is not None and last is not None else ()
        return None, [{"link": self._link(y), "title": str(y)} for y in years]


def _number(value: int) -> str:
    return grouped(value)


class ReviewChangeList(ChangeList):
    """The FilterSet's parameters are not admin lookups: they go through the FilterSet. The
    totals come from one aggregate query, whose row count is also the paginator's."""

    def get_filters_params(self, params=None):
        lookups = super().get_filters_params(params)
        for name in TransactionFilter.base_filters:
            lookups.pop(name, None)
        return lookups

    def get_queryset(self, request, exclude_parameters=None):
        queryset = super().get_queryset(request, exclude_parameters)
        self.review = admin_filterset(request, queryset)
        return self.review.qs if self.review.is_valid() else queryset.none()

    def get_results(self, request):
        self.totals = transaction_totals(self.queryset)
        request._ledger_row_count = self.totals.rows
        super().get_results(request)
        # The page's end users by name and e-mail, in one query (the holder column).
        people = end_user_people(obj.end_user_id for obj in self.result_list)
        for obj in self.result_list:
            person = people.get(obj.end_user_id)
            obj._person = person.label() if person is not None else ""

    def review_context(self, request) -> dict:
        superuser = scope_of(request.user).superuser
        form = self.review.form
        hidden = [
            (name, value)
            for name, value in self.params.items()
            if name not in TransactionFilter.base_filters
            and (name == ORDER_VAR or name.startswith(f"{self.date_hierarchy}__"))
        ]
        if not superuser and form["institution"].value():
            hidden.append(("institution", form["institution"].value()))
        totals = self.totals
        shown = [field for field in form if field.name != "institution" or superuser]
        errors = list(form.non_field_errors()) + [
            f"{field.label}: {error}"
            for field in form
            if field not in shown
            for error in field.errors
        ]
        return {
            "review_fields": shown,
            "review_hidden": hidden,
            "review_errors": errors,
            "review_invalid": bool(self.review.errors),
            "review_totals": {
                "rows": _number(totals.rows),
                "credits": _number(totals.credits),
                "money": ledger_money(self.queryset),
                "tokens": _number(totals.tokens),
                "images": _number(totals.images),
            },
            "export_query": self.get_query_string(),
            "review_dates": DateDrillDown(self).context(),
        }


class ExportChangeList(ReviewChangeList):
    """The change list's rows, filters, date drill-down and ordering, without reading a page."""

    def get_results(self, request):
        self.result_count = None  # type: ignore[assignment]  # no page: nothing is counted


def export_errors(filterset) -> HttpResponseBadRequest:
    lines = [
        f"{name}: {' '.join(messages)}" if name != "__all__" else " ".join(messages)
        for name, messages in filterset.errors.items()
    ]
    return HttpResponseBadRequest("\n".join(lines), content_type="text/plain; charset=utf-8")

"""Wallets and budget alerts: read-only views of what the money path wrote."""

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ...models import BudgetAlert, Course, License, Wallet
from ..money import with_money
from ..people import end_user_people
from ..usage import holder_names
from .base import ReadOnlyAdminMixin, ScopedAdminMixin


def wallet_holder_names(holders: list[str]) -> dict[str, str]:
    """Readable names of wallet holders: the license's, a key's (licensing.console.usage), and
    an end user's person by name and e-mail where one is known (`user:<id>`, and a student's
    course allowance `course:<id>:user:<id>`, with the course's code); a few queries whatever
    the number."""
    names = holder_names(holders)
    people_of: dict[str, tuple[int, int | None]] = {}
    for holder in holders:
        parts = holder.split(":")
        if len(parts) == 2 and parts[0] == "user" and _an_id(parts[1]):
            people_of[holder] = (int(parts[1]), None)
        elif len(parts) == 4 and parts[0] == "course" and parts[2] == "user":
            if _an_id(parts[1]) and _an_id(parts[3]):
                people_of[holder] = (int(parts[3]), int(parts[1]))
    people = end_user_people(pk for pk, _course in people_of.values())
    wanted = {course for _pk, course in people_of.values() if course is not None}
    codes = dict(Course.objects.filter(pk__in=wanted).values_list("pk", "code")) if wanted else {}
    for holder, (pk, course) in people_of.items():
        person = people.get(pk)
        if person is None or not (person.name or person.email):
            continue
        names[holder] = person.label()
        if course is not None:
            names[holder] = gettext("%(who)s in %(course)s") % {
                "who": person.label(),
                "course": codes.get(course, course),
            }
    return names


def _an_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 19


class HolderNameChangeList(ChangeList):
    """Names the holders of a page of wallets in a few queries."""

    def get_results(self, request):
        super().get_results(request)
        names = wallet_holder_names([obj.holder for obj in self.result_list])
        for obj in self.result_list:
            obj._holder_name = names.get(obj.holder, obj.holder)


# A wallet's period is a license's (daily ... lifetime) or a course allowance's (day, week,
# month): each shown by its own model's translated label.
PERIOD_LABELS: dict[str, Any] = {**dict(License.Period.choices), **dict(Course.Period.choices)}


class PeriodFilter(admin.AllValuesFieldListFilter):
    """The periods found, each by its label."""

    def choices(self, changelist):
        for choice in super().choices(changelist):
            shown = choice["display"]
            yield {**choice, "display": PERIOD_LABELS.get(str(shown), shown)}


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = (
        "license",
        "holder_name",
        "period_label",
        "window_start",
        # Not `unit`: micro-credits are the one unit (budget.UNITS); the money columns say it,
        # and the wallet's own page shows the column. A list that fits is worth more.
        "spent_display",
        "reserved_display",
        "limit_display",
        "remaining_display",
        "updated_at",
    )
    list_filter = (("period", PeriodFilter), "license")
    list_select_related = ("license__institution",)
    search_fields = ("holder", "license__name")
    date_hierarchy = "window_start"

    readonly_fields = ("holder_name",)

    def get_changelist(self, request, **kwargs):
        return HolderNameChangeList

    @admin.display(description=_("holder"), ordering="holder")
    def holder_name(self, obj):
        name = getattr(obj, "_holder_name", None)
        if name is None:
            name = wallet_holder_names([obj.holder]).get(obj.holder, obj.holder)
        return name

    @admin.display(description=_("period"), ordering="period")
    def period_label(self, obj):
        return PERIOD_LABELS.get(obj.period, obj.period)

    @admin.display(description=_("spent"), ordering="spent")
    def spent_display(self, obj):
        return with_money(obj.spent, obj.license.institution)

    @admin.display(description=_("reserved"), ordering="reserved")
    def reserved_display(self, obj):
        """Budget holds (licensing.ledger.reservations): counted as spent until charged."""
        return with_money(obj.reserved, obj.license.institution)

    @admin.display(description=_("license limit"))
    def limit_display(self, obj):
        return with_money(obj.license.budget_limit, obj.license.institution)

    @admin.display(description=_("remaining"))
    def remaining_display(self, obj):
        limit = obj.license.budget_limit
        if limit is None:
            return gettext("unlimited")
        return with_money(max(limit - obj.spent, 0), obj.license.institution)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdminMixin, ScopedAdminMixin, admin.ModelAdmin):
    """One row per license and window whose alert threshold was crossed."""

    list_display = (
        "license",
        "window_start",
        "holder",
        "spent_display",
        "threshold_display",
        "limit_display",
        "sent_at",
    )
    list_filter = ("license",)
    list_select_related = ("license__institution",)
    search_fields = ("license__name",)
    date_hierarchy = "created_at"

    @admin.display(description=_("spent"), ordering="spent")
    def spent_display(self, obj):
        return with_money(obj.spent, obj.license.institution)

    @admin.display(description=_("threshold"), ordering="threshold")
    def threshold_display(self, obj):
        return with_money(obj.threshold, obj.license.institution)

    @admin.display(description=_("limit"), ordering="limit")
    def limit_display(self, obj):
        return with_money(obj.limit, obj.license.institution)

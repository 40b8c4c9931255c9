"""The live feed's admin page (the rows of the user's scope, then the new ones as the websocket
brings them, licensing.console.consumers); the rows are published by licensing.ledger.feed.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from contextlib import nullcontext
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone, translation
from django.utils.translation import gettext_lazy as _

from ..ledger.feed import event_of
from ..models import ApiKey
from .people import end_user_people

PATH = "/ws/admin/transactions/"  # the page's websocket, served by consumers.TransactionFeed
PAGE_ROWS = 50  # rows the page starts with
PAGE_MAX_ROWS = 300  # rows the page keeps as new ones arrive
OUTCOME_LABELS = {
    "success": _("success"),
    "client_error": _("client error"),
    "denied": _("denied"),
    "failure": _("failure"),
}
NAMES_KEPT = 5000  # holders' names one viewer remembers (the consumer's HolderNames)


# --- the page ----------------------------------------------------------------------------


def admin_urls(model_admin) -> list:
    """The live page, under the transactions admin: /admin/licensing/transaction/live/."""
    view = model_admin.admin_site.admin_view(functools.partial(live_page, model_admin=model_admin))
    return [path("live/", view, name="licensing_transaction_live")]


def live_page(request, model_admin):
    """The latest rows of the user's scope, then (licensing/static/licensing/live.js) the new
    ones as the websocket brings them."""
    from ..access.scoping import scope_of

    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    latest = model_admin.get_queryset(request).select_related("license")
    latest = latest.order_by("-created_at", "-pk")[:PAGE_ROWS]
    events = HolderNames().name([event_of(row, row.license.name) for row in latest])
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": _("Live transactions"),
        "is_nav_sidebar_enabled": False,  # the table needs the whole width
        "rows": [_local(_shown(event)) for event in events],
        "time_zone": timezone.get_current_timezone_name(),
        "max_rows": PAGE_MAX_ROWS,
        "all_institutions": scope_of(request.user).superuser,
        "socket_path": PATH,
        "changelist_url": reverse("admin:licensing_transaction_changelist"),
    }
    return TemplateResponse(request, "admin/licensing/transaction/live.html", context)


def _local(row: dict) -> dict:
    """The row's time as the page shows it: in the current time zone (the institution's for
    its staff, licensing.console.local_time), as live.js shows the new ones."""
    at = timezone.localtime(datetime.fromisoformat(row["created_at"]))
    return {**row, "local_time": at.strftime("%Y-%m-%d %H:%M:%S")}


class HolderNames:
    """Who made each row, by name: the person behind the end user (name and e-mail) and the
    API key's name, for the live page and its websocket (the consumer keeps one per viewer).
    The publisher sends ids only (the hot path looks nothing up); each id is looked up once
    per viewer, a batch of new ones in two queries. The rows are the viewer's own scope's
    (the channel group decides), so naming them shows nothing the viewer may not see."""

    def __init__(self, kept: int = NAMES_KEPT, language: str | None = None):
        self.kept = kept
        # The viewer's (the websocket's rows; None: the page's, already active).
        self.language = language
        self.keys: OrderedDict[int, str] = OrderedDict()
        self.people: OrderedDict[int, str] = OrderedDict()

    def name(self, events: list[dict]) -> list[dict]:
        """The events, each with `holder`: "Ada Lovelace (ada@school.example) · key lab"
        (looking up the ids not known yet: the database)."""
        self.learn(*self.missing(events))
        return self.label(events)

    def missing(self, events: list[dict]) -> tuple[set[int], set[int]]:
        """The key and end-user ids of `events` not named yet (empty: `label` needs no query,
        so the websocket names a steady stream of rows without leaving the event loop)."""
        keys = {e["api_key_id"] for e in events if e.get("api_key_id") is not None}
        people = {e["end_user_id"] for e in events if e.get("end_user_id") is not None}
        return keys - set(self.keys), people - set(self.people)

    def learn(self, keys: set[int], people: set[int]) -> None:
        """Names for these ids: two queries at most."""
        if keys:
            for pk, name, prefix in ApiKey.objects.filter(pk__in=keys).values_list(
                "pk", "name", "prefix"
            ):
                self._keep(self.keys, pk, name or f"{prefix}…")
        for pk, person in end_user_people(people).items():
            self._keep(self.people, pk, person.label())

    def label(self, events: list[dict]) -> list[dict]:
        with translation.override(self.language) if self.language else nullcontext():
            for event in events:
                event["holder"] = self._holder(event.get("api_key_id"), event.get("end_user_id"))
        return events

    def _keep(self, names: OrderedDict, pk: int, text: str) -> None:
        names[pk] = text
        while len(names) > self.kept:
            names.popitem(last=False)

    def _holder(self, key_id, end_user_id) -> str:
        parts = []
        if end_user_id is not None:
            parts.append(self.people.get(end_user_id) or _("end user %(id)s") % {"id": end_user_id})
        if key_id is not None:
            name = self.keys.get(key_id) or str(key_id)
            parts.append(_("key %(name)s") % {"name": name})
        return " · ".join(parts) or "-"


def _shown(event: dict) -> dict:
    """The event with the texts live.js makes of it (live.js: holderOf, usageOf)."""
    if event["total_tokens"] is not None:
        usage = _("%(n)s tok") % {"n": event["total_tokens"]}
    else:
        usage = _("%(n)s img") % {"n": event["images"]} if event["images"] is not None else "-"
    return {
        **event,
        "usage": usage,
        "outcome_label": OUTCOME_LABELS.get(event["outcome"], event["outcome"]),
    }

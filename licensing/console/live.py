"""The live feed's admin page (the rows of the user's scope, then the new ones as the websocket
brings them, licensing.console.consumers); the rows are published by licensing.ledger.feed.
"""

from __future__ import annotations

import functools

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from ..ledger.feed import event_of

PATH = "/ws/admin/transactions/"  # the page's websocket, served by consumers.TransactionFeed
PAGE_ROWS = 50  # rows the page starts with
PAGE_MAX_ROWS = 300  # rows the page keeps as new ones arrive
OUTCOME_LABELS = {
    "success": _("success"),
    "client_error": _("client error"),
    "denied": _("denied"),
    "failure": _("failure"),
}


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
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": _("Live transactions"),
        "is_nav_sidebar_enabled": False,  # the table needs the whole width
        "rows": [_shown(event_of(row, row.license.name)) for row in latest],
        "max_rows": PAGE_MAX_ROWS,
        "all_institutions": scope_of(request.user).superuser,
        "socket_path": PATH,
        "changelist_url": reverse("admin:licensing_transaction_changelist"),
    }
    return TemplateResponse(request, "admin/licensing/transaction/live.html", context)


def _shown(event: dict) -> dict:
    """The event with the texts live.js makes of it (live.js: holderOf, usageOf)."""
    holder = (
        [_("key %(id)s") % {"id": event["api_key_id"]}] if event["api_key_id"] is not None else []
    )
    if event["end_user_id"] is not None:
        holder.append(_("user %(id)s") % {"id": event["end_user_id"]})
    if event["total_tokens"] is not None:
        usage = _("%(n)s tok") % {"n": event["total_tokens"]}
    else:
        usage = _("%(n)s img") % {"n": event["images"]} if event["images"] is not None else "-"
    return {
        **event,
        "holder": " · ".join(holder) or "-",
        "usage": usage,
        "outcome_label": OUTCOME_LABELS.get(event["outcome"], event["outcome"]),
    }

"""What every licensing admin page shares: institution scoping (rows, choices, filters,
permissions by role), the read-only and keep-the-ledger-intact mixins, and the cell formats."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import Http404, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import Promise, lazy
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.languages import grouped

from ...access.scoping import TEACHER, institution_id_of, owns, scope_of, scoped
from ...models import Institution


def _credits(value) -> str:
    return _("unlimited") if value is None else grouped(value)


def name_model(model, singular, plural) -> None:
    """The names the admin shows for `model` (its index, lists, breadcrumbs), where Django's
    own plural is wrong ("sso identitys"). Only what is shown: the migration state reads the
    model's declared Meta (`_meta.original_attrs`), so no migration follows."""
    model._meta.verbose_name = singular
    model._meta.verbose_name_plural = plural


def _short_time(value):
    """A compact time in the current time zone (the institution's for its staff,
    licensing.console.local_time) that keeps list columns narrow (the admin's own format
    wraps)."""
    if value is None:
        return "-"
    text = timezone.localtime(value).strftime("%Y-%m-%d %H:%M %Z")
    return format_html('<span style="white-space: nowrap">{}</span>', text)


def _time_heading(word: str | Promise):
    """A column's heading naming the current time zone ("time (Europe/Berlin)"), read when
    the page is drawn (a lazy `word` in the page's language)."""
    return lazy(lambda: f"{word} ({timezone.get_current_timezone_name()})", str)()


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A relation filter that offers only the related rows the user may see."""

    def field_choices(self, field, request, model_admin):
        related = field.related_model
        queryset = scoped(related._default_manager.all(), scope_of(request.user))
        return [(obj.pk, str(obj)) for obj in queryset]


if TYPE_CHECKING:  # what the mixin is mixed into, for mypy; a plain mixin at run time
    _ModelAdmin = admin.ModelAdmin
else:
    _ModelAdmin = object


def has_nul(params) -> bool:
    """A NUL in any query parameter: PostgreSQL refuses it in a text comparison (a 500)."""
    return any(
        "\x00" in key or "\x00" in value for key, values in params.lists() for value in values
    )


class RefuseNulParamsMixin(_ModelAdmin):
    """A list whose search or filter parameters hold a NUL answers 400, on every database."""

    def changelist_view(self, request, extra_context=None):
        if has_nul(request.GET):
            return HttpResponseBadRequest(
                "A parameter holds a NUL character.", content_type="text/plain; charset=utf-8"
            )
        return super().changelist_view(request, extra_context)


class ScopedAdminMixin(_ModelAdmin):
    """Institution scoping (see licensing.access.scoping) for every licensing admin: the rows, the
    foreign-key choices, the relation filters, the permissions by role; an object outside
    the scope is a 404 on every object URL (change, delete, history)."""

    def get_queryset(self, request):
        return scoped(super().get_queryset(request), scope_of(request.user))

    def _may(self, request, action, obj=None) -> bool:
        scope = scope_of(request.user)
        if not scope.allows(self.model, action):
            return False
        if obj is None or scope.superuser:
            return True
        if action == "view" and scope.role != TEACHER:
            return institution_id_of(obj) in (scope.institution_id, None)
        return owns(scope, obj)

    def has_module_permission(self, request):
        return self._may(request, "view")

    def has_view_permission(self, request, obj=None):
        return self._may(request, "view", obj)

    def has_add_permission(self, request, *args):
        return self._may(request, "add")

    def has_change_permission(self, request, obj=None):
        return self._may(request, "change", obj)

    def has_delete_permission(self, request, obj=None):
        return self._may(request, "delete", obj)

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        raise Http404(f"No {opts.verbose_name} with this id")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        scope = scope_of(request.user)
        related = db_field.related_model
        if not scope.superuser and "queryset" not in kwargs:
            kwargs["queryset"] = scoped(related._default_manager.all(), scope)
            if related is Institution:
                kwargs["required"] = True  # never a shared row from an institution admin
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_changeform_initial_data(self, request):
        initial: dict[str, Any] = super().get_changeform_initial_data(request)
        scope = scope_of(request.user)
        field_names = {f.name for f in self.model._meta.get_fields()}
        if scope.institution_id is not None and "institution" in field_names:
            initial.setdefault("institution", scope.institution_id)
        return initial

    def get_list_filter(self, request):
        filters = []
        superuser = scope_of(request.user).superuser
        specs: Sequence[Any] = super().get_list_filter(request)
        for spec in specs:
            name = spec if isinstance(spec, str) else spec[0]
            if not superuser and name.split("__")[-1] == "institution":
                continue  # one institution: nothing to filter
            field = _relation(self.model, name)
            filters.append((name, ScopedRelatedFilter) if field is not None else spec)
        return filters


def _relation(model, lookup: str):
    """The relation field a list_filter path ends on, else None."""
    field = None
    for part in lookup.split("__"):
        try:
            field = model._meta.get_field(part)
        except Exception:
            return None
        if not field.is_relation:
            return None
        model = field.related_model
    return field


class ReadOnlyAdminMixin(_ModelAdmin):
    """View only: no add, no change (fields shown read-only), no delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class KeepLedgerIntactMixin(_ModelAdmin):
    """Deleting a key, an end user, an issuer, a course or a license would null (or, for a
    license, is refused by) the ledger's references to it: refuse once ledger rows point at it
    (deactivate instead). No bulk delete, so every delete goes through this per-object check.
    The refusal says why and what to do instead (`kept_for_ledger`), on the delete page (403)
    and where the change page's delete link would be."""

    # What "deactivate" means for this kind of row, in the refusal's words.
    deactivate_hint = gettext_lazy(
        "Deactivate it instead: untick “active” on its page and save. It stops working at "
        "once and its history stays."
    )

    def ledger_rows(self, obj):
        raise NotImplementedError

    def has_delete_permission(self, request, obj=None):
        if obj is not None and self.ledger_rows(obj).exists():
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def kept_for_ledger(self, obj) -> dict | None:
        """Why `obj` cannot be deleted (its ledger rows) and what to do instead; None: it can."""
        rows = self.ledger_rows(obj).count() if obj is not None else 0
        if not rows:
            return None
        return {"rows": rows, "hint": self.deactivate_hint}

    def delete_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, object_id) if _an_id(object_id) else None
        kept = self.kept_for_ledger(obj) if obj is not None else None
        may = obj is not None and super().has_delete_permission(request, obj)
        if kept is None or not may or not self.has_view_permission(request, obj):
            return super().delete_view(request, object_id, extra_context)
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": _("Cannot delete %(name)s") % {"name": opts.verbose_name},
            "object": obj,
            "opts": opts,
            "kept": kept,
        }
        response = TemplateResponse(request, "admin/licensing/kept_for_ledger.html", context)
        response.status_code = 403  # refused, with the reason and the way out
        return response

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and super().has_delete_permission(request, obj):
            context["kept_for_ledger"] = self.kept_for_ledger(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


def _an_id(object_id) -> bool:
    """An object id the database can look up (a bigint): anything else is simply not found."""
    text = str(object_id)
    return text.isascii() and text.isdigit() and len(text) < 19

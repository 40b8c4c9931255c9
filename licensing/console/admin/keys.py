"""Who calls: API keys (created through `licensing.access.credentials.api_key_create`; the full
key is shown once, as a success message after saving; prefix and digest are never editable),
JWT issuers (HS256 secrets write-only, see `catalog.forms.AdminModelFormMixin`) and end users
(view-only). Keys, end users and issuers the ledger points at cannot be deleted (deactivate
instead)."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from catalog.forms import FORMFIELD_OVERRIDES
from core.localcache import clear_all

from ...access.changes import audit_api_key
from ...access.credentials import api_key_create
from ...access.erasure import end_user_erase, erasure_problem
from ...access.scoping import ADMIN, scope_of, scoped
from ...models import ApiKey, EndUser, JwtIssuer, Transaction
from ..forms import ApiKeyForm, JwtIssuerForm
from ..people import (
    PeopleChangeList,
    end_user_person,
    end_user_search,
    people_field,
    people_json,
    row_person,
)
from .base import KeepLedgerIntactMixin, ScopedAdminMixin, _short_time


@admin.register(ApiKey)
class ApiKeyAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = ApiKeyForm
    list_display = (
        "key_prefix",
        "kind",
        "license",
        "course",
        "name",
        "active",
        "expires",
        "last_used",
        "created",
    )
    list_filter = ("kind", "active", "license__institution", "license")
    list_select_related = ("license", "course")
    search_fields = ("prefix", "name", "license__name")
    autocomplete_fields = ("license",)
    date_hierarchy = "created_at"
    actions = ("activate", "deactivate")
    deactivate_hint = _(
        "Deactivate it instead: untick “active” on its page (or use the list's “Deactivate "
        "selected API keys”). It stops working at once; its history stays."
    )

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("license", "end_user", "kind", "course", "name", "active", "expires_at")
        return (
            "key_prefix",
            "kind",
            "license",
            "person",
            "course",
            "name",
            "active",
            "expires_at",
            "last_used_at",
            "created_at",
            "updated_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        fixed = ("key_prefix", "kind", "license", "person", "course")
        return (*fixed, "last_used_at", "created_at", "updated_at")

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        field = form.base_fields.get("end_user")
        if field is not None:
            queryset = scoped(EndUser.objects.select_related("license"), scope_of(request.user))
            form.base_fields["end_user"] = people_field(
                field,
                ApiKey._meta.get_field("end_user"),
                reverse("admin:licensing_apikey_people"),
                queryset,
            )
            form.base_fields["end_user"].help_text = _(
                "Optional: the student (an end user of the license) whose wallet the key pays "
                "from. Type part of their name or e-mail address."
            )
        return form

    def get_urls(self):
        people = self.admin_site.admin_view(self.people_view)
        return [path("people/", people, name="licensing_apikey_people"), *super().get_urls()]

    def people_view(self, request):
        """The key form's autocomplete: the end users of the caller's institution, by name and
        e-mail (each with their license: the key's must be theirs)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        queryset = scoped(EndUser.objects.select_related("license"), scope_of(request.user))
        ordering = ("user__last_name", "user__first_name", "subject")
        return people_json(request, queryset, "end_user", ordering, with_license=True)

    @admin.display(description=_("end user"))
    def person(self, obj):
        return end_user_person(obj.end_user).label() if obj.end_user_id else "-"

    def ledger_rows(self, obj):
        return Transaction.objects.filter(api_key=obj)

    @admin.display(description=_("key"), ordering="prefix")
    def key_prefix(self, obj):
        return f"{obj.prefix}…" if obj.prefix else "-"

    @admin.display(description=_("expires"), ordering="expires_at")
    def expires(self, obj):
        return _short_time(obj.expires_at)

    @admin.display(description=_("last used"), ordering="last_used_at")
    def last_used(self, obj):
        return _short_time(obj.last_used_at)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj):
        return _short_time(obj.created_at)

    def save_model(self, request, obj, form, change):
        if change:
            was_active = ApiKey.objects.filter(pk=obj.pk).values_list("active", flat=True).first()
            super().save_model(request, obj, form, change)
            if was_active is not None and was_active != obj.active:
                audit_api_key(
                    obj,
                    created=obj.active,
                    via="admin",
                    request=request,
                    extra={"before": {"active": was_active}, "after": {"active": obj.active}},
                )
            return
        row, key = api_key_create(
            license=obj.license,
            name=obj.name,
            expires_at=obj.expires_at,
            end_user=obj.end_user,
            kind=obj.kind,
            course=obj.course,
        )
        if not obj.active:
            row.active = False
            row.save(update_fields=["active", "updated_at"])
        audit_api_key(row, created=True, via="admin", request=request)
        # The admin goes on with `obj` (log entry, redirect): make it the created row.
        for field in ApiKey._meta.concrete_fields:
            setattr(obj, field.attname, getattr(row, field.attname))
        obj._state.adding = False
        obj._state.db = row._state.db
        messages.success(
            request,
            _(
                "The new API key is %(key)s — copy it now: it is not stored and will not be "
                "shown again."
            )
            % {"key": key},
        )
        if row.is_front_end:
            messages.info(request, front_end_hint())

    def delete_model(self, request, obj):
        # Only an unused key can be deleted (KeepLedgerIntactMixin); it is revoked for good.
        if obj.active:
            audit_api_key(obj, created=False, via="admin", request=request, extra={"deleted": True})
        super().delete_model(request, obj)

    def _set_active(self, request, queryset, active: bool):
        changing = list(queryset.filter(active=not active).select_related("license"))
        updated = queryset.update(active=active)
        clear_all()  # update() sends no post_save: drop the API's cached keys here
        for row in changing:  # a re-activation is logged as a key (re)created
            audit_api_key(
                row,
                created=active,
                via="admin",
                request=request,
                extra={"before": {"active": not active}, "after": {"active": active}},
            )
        text = _("%(n)s API key(s) activated.") if active else _("%(n)s API key(s) deactivated.")
        self.message_user(request, text % {"n": updated}, messages.SUCCESS)

    @admin.action(description=_("Activate selected API keys"), permissions=["change"])
    def activate(self, request, queryset):
        self._set_active(request, queryset, True)

    @admin.action(description=_("Deactivate selected API keys"), permissions=["change"])
    def deactivate(self, request, queryset):
        self._set_active(request, queryset, False)


def front_end_hint() -> str:
    return gettext(
        "A front-end key: give it to Open WebUI as its OpenAI API key, with "
        "ENABLE_FORWARD_USER_INFO_HEADERS=true. Each student then pays from their own allowance "
        "(the guide: docs/open-webui.md)."
    )


@admin.register(JwtIssuer)
class JwtIssuerAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = JwtIssuerForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = (
        "issuer",
        "institution",
        "license",
        "audience",
        "algorithm_list",
        "key_source",
        "active",
        "updated_at",
    )
    list_filter = ("active", "institution")
    list_select_related = ("institution", "license")
    search_fields = ("issuer", "audience", "institution__name", "license__name")
    autocomplete_fields = ("institution", "license")
    readonly_fields = ("updated_at",)

    def get_fieldsets(self, request, obj=None):
        secret = ["hs256_secret"] + (["clear_hs256_secret"] if obj else [])
        return [
            (
                None,
                {
                    "fields": ["issuer", "audience", "institution", "license", "active"]
                    + (["updated_at"] if obj else [])
                },
            ),
            ("Verification", {"fields": ["algorithms", "jwks_url", "public_keys", *secret]}),
            ("Courses", {"fields": ["course_claim"]}),
        ]

    def ledger_rows(self, obj):
        return Transaction.objects.filter(end_user__issuer=obj)

    @admin.display(description=_("algorithms"))
    def algorithm_list(self, obj):
        algs = obj.algorithms
        return ", ".join(str(a) for a in algs) if isinstance(algs, list) else str(algs)

    @admin.display(description=_("keys from"))
    def key_source(self, obj):
        sources = []
        if obj.jwks_url:
            sources.append("JWKS")
        if obj.public_keys:
            sources.append("PEM")
        if obj.hs256_secret:
            sources.append("HS256 secret")
        return ", ".join(sources) or "-"


class EndUserChangeList(PeopleChangeList):
    person_id = "pk"


@admin.register(EndUser)
class EndUserAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    """Created by a user's first valid token, a portal sign-in or an LTI launch: view only
    (delete while it has no ledger rows). Listed and found by the person's name and e-mail;
    the subject (the identity provider's or the LMS's id) beside them."""

    list_display = ("name", "email", "subject", "issuer", "license", "created_at")
    list_filter = ("issuer", "license")
    list_select_related = ("issuer", "license")
    search_fields = ("subject",)  # and the person's name and e-mail: get_search_results
    search_help_text = _("Part of a name, an e-mail address or a subject.")
    date_hierarchy = "created_at"
    fields = ("name", "email", "subject", "issuer", "license", "user", "active", "created_at")
    readonly_fields = fields
    deactivate_hint = _(
        "It stays: its license or its sign-in role decides whether it may still make requests "
        "(a student who loses the role is deactivated at their next sign-in)."
    )

    def get_changelist(self, request, **kwargs):
        return EndUserChangeList

    def get_search_results(self, request, queryset, search_term):
        if not search_term.strip():
            return queryset, False
        return end_user_search(queryset, search_term), False

    def _person(self, obj):
        return row_person(obj, obj)

    @admin.display(description=_("name"))
    def name(self, obj):
        return self._person(obj).name or "-"

    @admin.display(description=_("e-mail"))
    def email(self, obj):
        return self._person(obj).email or "-"

    def ledger_rows(self, obj):
        return Transaction.objects.filter(end_user=obj)

    # --- erasing the person (licensing.access.erasure) ----------------------------------------

    change_form_template = "admin/licensing/enduser/change_form.html"
    ERASE_WORD = "ERASE"

    def get_urls(self):
        erase = self.admin_site.admin_view(self.erase_view)
        return [
            path("<path:object_id>/erase/", erase, name="licensing_enduser_erase"),
            *super().get_urls(),
        ]

    def may_erase(self, request) -> bool:
        """Superusers and the institution's admins (reviewers and teachers read, never erase)."""
        scope = scope_of(request.user)
        return scope.superuser or scope.role == ADMIN

    def change_view(self, request, object_id, form_url="", extra_context=None):
        context = dict(extra_context or {})
        if self.may_erase(request):
            context["erase_url"] = reverse("admin:licensing_enduser_erase", args=[object_id])
        return super().change_view(request, object_id, form_url, context)

    def erase_view(self, request, object_id):
        obj = self.get_object(request, object_id)  # another institution's, or none: 404
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No person with this id")
        if not self.may_erase(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "object": obj,
            "title": gettext("Erase a person"),
            "problem": erasure_problem(obj),
            "counts": {
                "keys": obj.api_keys.filter(active=True).count(),
                "rows": Transaction.objects.filter(end_user=obj).count(),
            },
        }
        if request.method == "POST" and context["problem"] is None:
            if request.POST.get("confirm", "").strip() == self.ERASE_WORD:
                erased = end_user_erase(end_user=obj, request=request)
                messages.success(
                    request,
                    gettext("The person is erased; they are now “%(pseudonym)s”.")
                    % {"pseudonym": erased.pseudonym},
                )
                return HttpResponseRedirect(
                    reverse("admin:licensing_enduser_change", args=[obj.pk])
                )
            context["error"] = gettext("Type ERASE to confirm.")
        status = 400 if request.method == "POST" else 200
        return TemplateResponse(
            request, "admin/licensing/enduser/erase.html", context, status=status
        )

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

"""The catalog admin: providers, connections (credentials write-only), models and provider rows.

Connection credentials are never shown: not in list views, not rendered back into the change
form (see `catalog.forms.ConnectionForm`).
"""

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, Q
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from core.localcache import clear_all

from .circuit import CLOSED, OPEN
from .forms import FORMFIELD_OVERRIDES, CatalogModelForm, ConnectionForm
from .models import Connection, Model, Provider, ProviderModel, parse_tags
from .selectors import ConnectionHealth, connections_health, shown_base_url, tagged

# Predicates of users (besides superusers) who may view the catalog; the app that knows about
# institution roles registers one (the catalog imports no app above it).
_catalog_viewers: list[Callable[[Any], bool]] = []


def register_catalog_viewer(predicate) -> None:
    _catalog_viewers.append(predicate)


class SuperuserCatalogMixin:
    """The catalog is changed by superusers only; registered viewers may read it. Provider
    connections (credentials) are superuser-only altogether (`viewable = False`)."""

    viewable = True

    def _superuser(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        if self._superuser(request):
            return True
        user = request.user
        return (
            self.viewable
            and user.is_active
            and user.is_staff
            and any(viewer(user) for viewer in _catalog_viewers)
        )

    def has_module_permission(self, request):
        return self.has_view_permission(request)

    def has_add_permission(self, request, *args):
        return self._superuser(request)

    def has_change_permission(self, request, obj=None):
        return self._superuser(request)

    def has_delete_permission(self, request, obj=None):
        return self._superuser(request)


@admin.register(Provider)
class ProviderAdmin(SuperuserCatalogMixin, admin.ModelAdmin):
    list_display = ("slug", "kind", "description", "connection_count", "model_count")
    list_filter = ("kind",)
    search_fields = ("slug", "description")

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _connections=Count("connections", distinct=True),
                _models=Count("model_rows", distinct=True),
            )
        )

    @admin.display(description=_("connections"), ordering="_connections")
    def connection_count(self, obj):
        return obj._connections

    @admin.display(description=_("models served"), ordering="_models")
    def model_count(self, obj):
        return obj._models


class TagListFilter(admin.FieldListFilter):
    """`?tag=eu`: the connections carrying a tag; the choices are the tags in use (one query)."""

    parameter_name = "tag"

    def __init__(self, field, request, params, model, model_admin, field_path):
        value = params.get(self.parameter_name)
        self.value = (value[-1] if isinstance(value, list) else value) or None
        stored = Connection.objects.exclude(tags="").values_list("tags", flat=True).distinct()
        self.tags = sorted({tag for text in stored for tag in parse_tags(text)})
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = _("tag")

    def expected_parameters(self):
        return [self.parameter_name]

    def has_output(self):
        return bool(self.tags)

    def queryset(self, request, queryset):
        if self.value is None:
            return queryset
        return queryset.filter(tagged(self.value))

    def get_facet_counts(self, pk_attname, filtered_qs):
        return {f"{i}__c": Count(pk_attname, filter=tagged(tag)) for i, tag in enumerate(self.tags)}

    def choices(self, changelist):
        counts = self.get_facet_queryset(changelist) if changelist.add_facets else None
        yield {
            "selected": self.value is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "All",
        }
        for i, tag in enumerate(self.tags):
            yield {
                "selected": self.value == tag,
                "query_string": changelist.get_query_string({self.parameter_name: tag}),
                "display": f"{tag} ({counts[f'{i}__c']})" if counts is not None else tag,
            }


class ConnectionChangeList(ChangeList):
    """Reads the circuits of the page's connections in one call (one Redis pipeline), not one
    per row, and hands each row its own."""

    def get_results(self, request):
        super().get_results(request)
        rows = list(self.result_list)  # evaluates the page's queryset; the template reuses it
        for connection, health in zip(rows, _health_in_order(rows), strict=True):
            connection._health = health


def _health_in_order(rows: list[Connection]) -> list[ConnectionHealth]:
    found = connections_health(rows)
    return [found[row.pk] for row in rows]


def _health(obj) -> ConnectionHealth:
    health = getattr(obj, "_health", None)
    if health is None:  # not from the change list (a single object): read its own
        health = connections_health([obj])[obj.pk]
    return health


def _utc(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


@admin.register(Connection)
class ConnectionAdmin(SuperuserCatalogMixin, admin.ModelAdmin):
    viewable = False
    form = ConnectionForm
    formfield_overrides = FORMFIELD_OVERRIDES
    # What an operator looks for first (is it healthy, how much traffic, which tags) on the
    # left: on a narrow screen the table scrolls, and the URL and timestamps can wait.
    list_display = (
        "provider",
        "name",
        "circuit_state",
        "weight",
        "tag_list",
        "active",
        "credentials_set",
        "last_error",
        "cooldown_until",
        "shown_base_url",
        "region",
        "updated_at",
    )
    list_display_links = ("provider", "name")
    list_filter = ("active", "provider", ("tags", TagListFilter))
    list_select_related = ("provider",)
    search_fields = ("name", "provider__slug", "base_url")
    autocomplete_fields = ("provider",)
    readonly_fields = ("updated_at",)

    def get_changelist(self, request, **kwargs):
        return ConnectionChangeList

    def get_fieldsets(self, request, obj=None):
        api_key = ["api_key"] + (["clear_api_key"] if obj else [])
        aws = ["region", "aws_access_key_id", "aws_secret_access_key"]
        if obj:
            aws.append("clear_aws_secret_access_key")
        return [
            (
                None,
                {
                    "fields": [
                        "provider",
                        "name",
                        "base_url",
                        "timeout",
                        "weight",
                        "tags",
                        "active",
                    ]
                    + (["updated_at"] if obj else [])
                },
            ),
            (_("API key (OpenAI-style providers)"), {"fields": api_key}),
            (_("AWS (Bedrock)"), {"fields": aws}),
            (
                _("Azure OpenAI"),
                {"fields": ["api_version", "deployments"], "classes": ["collapse"]},
            ),
            (
                _("OpenAI-compatible server"),
                {"fields": ["responses_api", "stream_usage"], "classes": ["collapse"]},
            ),
        ]

    @admin.display(description=_("credentials set"), boolean=True)
    def credentials_set(self, obj):
        return obj.has_credentials

    @admin.display(description=_("base URL"), ordering="base_url")
    def shown_base_url(self, obj):
        return shown_base_url(obj.base_url)

    @admin.display(description=_("tags"), ordering="tags")
    def tag_list(self, obj):
        return ", ".join(parse_tags(obj.tags)) or "-"

    @admin.display(description=_("circuit"))
    def circuit_state(self, obj):
        health = _health(obj)
        label = health.state.replace("_", "-")
        if health.state == CLOSED and not health.failures:
            return label
        color = "var(--error-fg)" if health.state == OPEN else "#b36b00"
        title = _("%(n)s failure(s) in a row") % {"n": health.failures}
        return format_html('<strong style="color: {}" title="{}">{}</strong>', color, title, label)

    @admin.display(description=_("last error"))
    def last_error(self, obj):
        health = _health(obj)
        if not health.last_error:
            return "-"
        when = _utc(health.last_error_at) if health.last_error_at else ""
        return format_html('{} <span class="quiet">{}</span>', health.last_error, when)

    @admin.display(description=_("cool-down until"))
    def cooldown_until(self, obj):
        health = _health(obj)
        if health.state != OPEN or health.open_until is None:
            return "-"  # half-open: the cool-down is over, the next request probes
        return _utc(health.open_until)


class ProviderModelInline(SuperuserCatalogMixin, admin.TabularInline):
    model = ProviderModel
    fields = ("provider", "upstream_model_id", "active", "priority")
    autocomplete_fields = ("provider",)
    extra = 0

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("model", "provider")


@admin.register(Model)
class CatalogModelAdmin(SuperuserCatalogMixin, admin.ModelAdmin):
    form = CatalogModelForm
    list_display = ("model_id", "owned_by", "features", "listed", "active_rows", "updated_at")
    list_filter = ("listed", "owned_by")
    list_select_related = ("owned_by",)
    search_fields = ("model_id",)
    autocomplete_fields = ("owned_by",)
    readonly_fields = ("updated_at",)
    formfield_overrides = FORMFIELD_OVERRIDES
    inlines = (ProviderModelInline,)
    fieldsets = (
        (None, {"fields": ("model_id", "owned_by", "listed", "updated_at")}),
        (
            _("Shown to clients"),
            {"fields": ("supported_features", "input_modality", "output_modality")},
        ),
        (_("Billing and behaviour"), {"fields": ("cost", "options")}),
    )

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_active_rows=Count("provider_rows", filter=Q(provider_rows__active=True)))
        )

    @admin.display(description=_("features"))
    def features(self, obj):
        value = obj.supported_features
        if isinstance(value, list):
            return ", ".join(str(item) for item in value)
        return str(value)

    @admin.display(description=_("active rows"), ordering="_active_rows")
    def active_rows(self, obj):
        return obj._active_rows


@admin.register(ProviderModel)
class ProviderModelAdmin(SuperuserCatalogMixin, admin.ModelAdmin):
    list_display = ("model", "provider", "upstream_model_id", "active", "priority")
    list_display_links = ("model", "provider")
    list_editable = ("active",)
    list_filter = ("active", "provider", "model__owned_by")
    list_select_related = ("model", "provider")
    search_fields = ("model__model_id", "upstream_model_id", "provider__slug")
    autocomplete_fields = ("model", "provider")
    actions = ("activate", "deactivate")

    def _set_active(self, request, queryset, active: bool):
        updated = queryset.update(active=active)
        clear_all()  # update() sends no post_save: drop the API's cached catalog here
        if active:
            text = _("%(n)s provider row(s) activated.")
        else:
            text = _("%(n)s provider row(s) deactivated.")
        self.message_user(request, text % {"n": updated}, messages.SUCCESS)

    @admin.action(description=_("Activate selected provider rows"), permissions=["change"])
    def activate(self, request, queryset):
        self._set_active(request, queryset, True)

    @admin.action(description=_("Deactivate selected provider rows"), permissions=["change"])
    def deactivate(self, request, queryset):
        self._set_active(request, queryset, False)

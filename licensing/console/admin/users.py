"""Users and their institution role (superusers only; institution admins have their
colleagues: licensing.console.admin.colleagues); institution admins may view the catalog.
A superuser's changes of roles and of the active flag land in the audit log too."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.utils.translation import gettext_lazy as _

from catalog.admin import register_catalog_viewer

from ...access.audit import audit_event_record
from ...access.scoping import scope_of
from ...models import AdminProfile, AuditEvent

register_catalog_viewer(lambda user: scope_of(user).is_institution_admin)


class SuperuserOnlyMixin:
    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission


class AdminProfileInline(admin.StackedInline):
    model = AdminProfile
    can_delete = True
    extra = 0
    max_num = 1
    autocomplete_fields = ("institution",)
    verbose_name = _("institution and role")
    verbose_name_plural = _("institution and role (leave empty for a superuser)")


def _role_of(profile_id) -> tuple[int, str] | None:
    row = AdminProfile.objects.filter(pk=profile_id).values_list("institution_id", "role").first()
    return None if profile_id is None or row is None else (row[0], row[1])


def audit_role(request, user, before: tuple[int, str] | None, after: tuple[int, str] | None):
    """A superuser gave, changed or took away a role (institution, role) before and after."""
    if before == after:
        return
    for institution_id in {pair[0] for pair in (before, after) if pair is not None}:
        audit_event_record(
            action=AuditEvent.Action.ROLE_CHANGED,
            request=request,
            institution=institution_id,
            target=f"user:{user.pk}",
            detail={
                "before": {"role": before[1] if before and before[0] == institution_id else None},
                "after": {"role": after[1] if after and after[0] == institution_id else None},
            },
        )


@admin.register(AdminProfile)
class AdminProfileAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    list_display = ("user", "institution", "role")
    list_filter = ("role", "institution")
    list_select_related = ("user", "institution")
    search_fields = ("user__username", "institution__name")
    autocomplete_fields = ("institution", "user")

    def save_model(self, request, obj, form, change):
        before = _role_of(obj.pk) if change else None
        super().save_model(request, obj, form, change)
        audit_role(request, obj.user, before, (obj.institution_id, obj.role))

    def delete_model(self, request, obj):
        before = _role_of(obj.pk)
        super().delete_model(request, obj)
        audit_role(request, obj.user, before, None)


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class GatewayUserAdmin(SuperuserOnlyMixin, UserAdmin):
    """Superusers tie a staff user to an institution and a role here (or with
    `manage.py create_institution_admin`); only superusers manage users."""

    inlines = (AdminProfileInline,)
    list_display = (
        "username",
        "email",
        "is_staff",
        "is_superuser",
        "institution",
        "role",
        "is_active",
    )
    list_select_related = ("gateway_profile__institution",)

    def save_model(self, request, obj, form, change):
        was_active = type(obj).objects.filter(pk=obj.pk).values_list("is_active", flat=True).first()
        super().save_model(request, obj, form, change)
        profile = AdminProfile.objects.filter(user_id=obj.pk).first()
        institution = profile.institution_id if profile else None
        if not change:
            audit_event_record(
                action=AuditEvent.Action.USER_CREATED,
                request=request,
                institution=institution,
                target=f"user:{obj.pk}",
                detail={"after": {"username": obj.username, "email": obj.email}},
            )
        elif was_active is not None and was_active != obj.is_active:
            audit_event_record(
                action=AuditEvent.Action.USER_DEACTIVATED
                if not obj.is_active
                else AuditEvent.Action.ROLE_CHANGED,
                request=request,
                institution=institution,
                target=f"user:{obj.pk}",
                detail={"before": {"active": was_active}, "after": {"active": obj.is_active}},
            )

    def save_formset(self, request, form, formset, change):
        if formset.model is not AdminProfile:
            return super().save_formset(request, form, formset, change)
        user = form.instance
        before = _role_of(getattr(getattr(user, "gateway_profile", None), "pk", None))
        super().save_formset(request, form, formset, change)
        row = AdminProfile.objects.filter(user_id=user.pk).values_list("institution_id", "role")
        audit_role(request, user, before, row.first())

    @admin.display(description=_("institution"), ordering="gateway_profile__institution__name")
    def institution(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.institution if profile else "-"

    @admin.display(description=_("role"), ordering="gateway_profile__role")
    def role(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.get_role_display().split(":")[0] if profile else "-"

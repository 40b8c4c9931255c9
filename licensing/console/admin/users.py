"""Users and their institution role (superusers only); institution admins may view the catalog."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from catalog.admin import register_catalog_viewer

from ...access.scoping import scope_of
from ...models import AdminProfile

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
    verbose_name = "institution and role"
    verbose_name_plural = "institution and role (leave empty for a superuser)"


@admin.register(AdminProfile)
class AdminProfileAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    list_display = ("user", "institution", "role")
    list_filter = ("role", "institution")
    list_select_related = ("user", "institution")
    search_fields = ("user__username", "institution__name")
    autocomplete_fields = ("institution", "user")


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

    @admin.display(description="institution", ordering="gateway_profile__institution__name")
    def institution(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.institution if profile else "-"

    @admin.display(description="role", ordering="gateway_profile__role")
    def role(self, obj):
        profile = getattr(obj, "gateway_profile", None)
        return profile.get_role_display().split(":")[0] if profile else "-"

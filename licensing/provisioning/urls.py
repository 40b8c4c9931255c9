"""/scim/v2/'s URLs (gateway_site.urls includes them)."""

from django.urls import path, re_path

from . import views

urlpatterns = [
    path("ServiceProviderConfig", views.service_provider_config, name="scim-config"),
    path("ResourceTypes", views.resource_types, name="scim-resource-types"),
    path("ResourceTypes/<str:kind>", views.resource_types, name="scim-resource-type"),
    path("Schemas", views.schemas, name="scim-schemas"),
    path("Schemas/<str:schema>", views.schemas, name="scim-schema"),
    path(".search", views.root_search, name="scim-search"),
    path("Users/.search", views.users_search, name="scim-users-search"),
    path("Groups/.search", views.groups_search, name="scim-groups-search"),
    path("Users", views.users, name="scim-users"),
    path("Users/<str:scim_id>", views.user, name="scim-user"),
    path("Groups", views.groups, name="scim-groups"),
    path("Groups/<str:scim_id>", views.group, name="scim-group"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]

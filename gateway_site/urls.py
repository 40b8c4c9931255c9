from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from inference.api import api

from .middleware import api_not_found_view

admin.site.site_header = "Inference Gateway"
admin.site.site_title = "Inference Gateway admin"

urlpatterns = [
    path("v1/", api.urls),
    re_path(r"^v1/", api_not_found_view),
    path("admin/", include("licensing.console.account")),  # before the admin's catch-all
    path("admin/", admin.site.urls),
    path("manage/v1/", include("licensing.console.manage_api")),
    path("portal/", include("licensing.portal.urls")),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from inference.api import api

admin.site.site_header = "Inference Gateway"
admin.site.site_title = "Inference Gateway admin"

urlpatterns = [
    path("v1/", api.urls),
    path("admin/", admin.site.urls),
    path("manage/v1/", include("licensing.manage_api")),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]

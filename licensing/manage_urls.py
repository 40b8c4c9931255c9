"""The management API's URLs, /manage/v1/: one router over the viewsets of manage_api (licenses,
keys, end users, the ledger, the audit log, connections), usage_api (usage) and manage_courses
(courses), in a module of its own so neither of those imports the other's dependents (no import
circle). The router's root lists every viewset it holds, then the OpenAPI document and its docs
page."""

from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.permissions import AllowAny
from rest_framework.routers import APIRootView, DefaultRouter

from .console.manage_api import (
    ApiKeyViewSet,
    AuditEventViewSet,
    ConnectionViewSet,
    EndUserViewSet,
    LicenseViewSet,
    ManageDocsView,
    TransactionViewSet,
)
from .console.usage_api import UsageViewSet
from .courses.manage import CourseViewSet

# Beside the viewsets, the root names the API's description and its page (by URL name).
DESCRIBED_BY = {"openapi": "manage-openapi", "docs": "manage-docs"}


class ManageRoot(APIRootView):
    """`GET /manage/v1/`: every endpoint of the API, what the router holds (anyone may read it,
    as the OpenAPI document: it lists paths, never a row)."""

    permission_classes = [AllowAny]


class ManageRouter(DefaultRouter):
    APIRootView = ManageRoot

    def get_api_root_view(self, api_urls=None):
        list_name = self.routes[0].name  # DRF's own: "{basename}-list"
        root = {prefix: list_name.format(basename=name) for prefix, _, name in self.registry}
        return self.APIRootView.as_view(api_root_dict={**root, **DESCRIBED_BY})


router = ManageRouter(trailing_slash=False)
router.register("licenses", LicenseViewSet, basename="manage-license")
router.register("keys", ApiKeyViewSet, basename="manage-key")
router.register("end-users", EndUserViewSet, basename="manage-end-user")
router.register("usage", UsageViewSet, basename="manage-usage")
router.register("transactions", TransactionViewSet, basename="manage-transaction")
router.register("audit", AuditEventViewSet, basename="manage-audit")
router.register("connections", ConnectionViewSet, basename="manage-connection")
router.register("courses", CourseViewSet, basename="manage-course")

urlpatterns = [
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="manage-openapi"),
    path("docs", ManageDocsView.as_view(), name="manage-docs"),
    path("", include(router.urls)),
]

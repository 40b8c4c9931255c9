"""The management API's URLs, /manage/v1/: one router over the viewsets of manage_api (licenses,
keys, end users, the ledger, the audit log, connections) and manage_courses (courses), in a
module of its own so neither of those imports the other's dependents (no import circle)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.routers import DefaultRouter

from .console.manage_api import (
    ApiKeyViewSet,
    AuditEventViewSet,
    ConnectionViewSet,
    EndUserViewSet,
    LicenseViewSet,
    TransactionViewSet,
)
from .courses.manage import CourseViewSet

router = DefaultRouter(trailing_slash=False)
router.register("licenses", LicenseViewSet, basename="manage-license")
router.register("keys", ApiKeyViewSet, basename="manage-key")
router.register("end-users", EndUserViewSet, basename="manage-end-user")
router.register("transactions", TransactionViewSet, basename="manage-transaction")
router.register("audit", AuditEventViewSet, basename="manage-audit")
router.register("connections", ConnectionViewSet, basename="manage-connection")
router.register("courses", CourseViewSet, basename="manage-course")

urlpatterns = [
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="manage-openapi"),
    path("usage", include("licensing.console.usage_api")),
    path("", include(router.urls)),
]

from django.urls import path

from . import views

app_name = "portal"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.login, name="login"),
    path("logout/", views.logout, name="logout"),
    path("data/", views.data_flow, name="data"),
    path("data/export/", views.data_export, name="data_export"),
    path("terms/", views.terms, name="terms"),
    path("keys/", views.keys, name="keys"),
    # The id is parsed in the view: anything but a positive bigint is a 404, never a 500.
    path("keys/<str:key_id>/revoke/", views.key_revoke, name="key_revoke"),
    path("courses/<str:course_id>/", views.course, name="course"),
    path("courses/<str:course_id>/exam/", views.course_exam, name="course_exam"),
    path(
        "courses/<str:course_id>/keys/<str:key_id>/revoke/",
        views.course_key_revoke,
        name="course_key_revoke",
    ),
]

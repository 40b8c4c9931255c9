"""CSRF outside /v1: the admin stack's CsrfViewMiddleware checks every POST of every view
(gateway_site.middleware.AdminStack runs its `process_view`), not only the views that carry
`csrf_protect` themselves; views that exempt themselves (the management API: DRF checks its
session logins itself) stay exempt."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.portal.conftest import signed_in

pytestmark = pytest.mark.django_db


def test_a_portal_post_without_the_token_is_refused(student):
    user, end_user = student
    client = signed_in(user, enforce_csrf=True)
    answer = client.post("/portal/keys/", {"name": "no token"})
    assert answer.status_code == 403
    assert not end_user.api_keys.exists()


def test_a_portal_post_with_the_token_goes_through(student):
    user, end_user = student
    client = signed_in(user, enforce_csrf=True)
    client.get("/portal/keys/")
    token = client.cookies["csrftoken"].value
    answer = client.post("/portal/keys/", {"name": "with token", "csrfmiddlewaretoken": token})
    assert answer.status_code != 403


def test_the_admin_login_post_without_the_token_is_refused(db):
    answer = Client(enforce_csrf_checks=True).post(
        "/admin/login/", {"username": "x", "password": "y"}
    )
    assert answer.status_code == 403


def test_the_management_api_stays_exempt(db):
    # No session, no token: DRF answers 401/403 for the missing credentials, not a CSRF page.
    answer = Client(enforce_csrf_checks=True).post("/manage/v1/keys", {})
    assert answer.status_code in (401, 403)
    assert b"CSRF" not in answer.content

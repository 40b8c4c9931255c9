"""Helpers for the live-feed tests: sessions as the browser has them, the websocket stack as
the server runs it, ledger entries as the pipeline makes them."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import channels
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.models import AdminProfile
from tests.ledger_helpers import entry_for


def staff_user(username: str, *, institution=None, role=None, **fields):
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True, **fields)
    if role is not None:
        AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


def session_cookie(user) -> str:
    """The `Cookie` header of a browser logged into the admin as `user`."""
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def feed_entry(license, request_id: str, **fields):
    """A ledger entry carrying what the live feed routes on, as the pipeline fills it."""
    return entry_for(
        license,
        request_id,
        institution_id=license.institution_id,
        license_name=license.name,
        **fields,
    )


def _websocket_communicator():
    """channels.testing's WebsocketCommunicator. The package's __init__ also imports its live
    server test case, which needs daphne (not a dependency: uvicorn serves the gateway); the
    communicator itself does not, so without daphne its modules are loaded on their own."""
    try:
        from channels.testing import WebsocketCommunicator
    except ModuleNotFoundError as exc:
        if exc.name != "daphne":
            raise
        package = types.ModuleType("channels.testing")
        package.__path__ = [str(Path(channels.__file__).parent / "testing")]
        sys.modules["channels.testing"] = package
        from channels.testing.websocket import WebsocketCommunicator
    return WebsocketCommunicator


WebsocketCommunicator = _websocket_communicator()

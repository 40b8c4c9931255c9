"""ASGI entry point: `uvicorn gateway_site.asgi:application`."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")

import django  # noqa: E402

django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter  # noqa: E402

from .handler import GatewayASGIHandler  # noqa: E402

django_application = GatewayASGIHandler()

application = ProtocolTypeRouter({"http": django_application})

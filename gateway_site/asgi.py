"""ASGI entry point: `uvicorn gateway_site.asgi:application`."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from gateway_site.bodylimit import BodyLimit  # noqa: E402

django_application = get_asgi_application()

application = ProtocolTypeRouter(
    {"http": BodyLimit(django_application, max_bytes=settings.GATEWAY_MAX_BODY_BYTES)}
)
